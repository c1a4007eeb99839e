# ctest driver (cmake -P): install the devel component of this build into a
# temporary prefix, move the prefix (the package must be relocatable), then
# configure, build and run a consumer project that finds it with
# find_package(tpool). Fails with a sentence naming the step.
#
# -D variables: SOURCE_DIR BUILD_DIR WORK_DIR CONSUMER_DIR CONSUMER_NAME GENERATOR
#   CXX_COMPILER C_COMPILER CXX_FLAGS C_FLAGS LINKER_FLAGS BUILD_TYPE
#   COMPONENTS (,-separated install components) EXPECT_FILES (,-separated paths under
#   the prefix)
#   EXPECT (a regex the consumer's output must match; empty: build only)
#   EXTRA_ARGS (-D arguments for the consumer) POOL_AUTO (see below)
cmake_minimum_required(VERSION 3.25)

function(step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test: ${what} failed (exit ${rc}).\n"
                        "command: ${ARGN}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

string(REPLACE "," ";" COMPONENTS "${COMPONENTS}")
string(REPLACE "," ";" EXPECT_FILES "${EXPECT_FILES}")
set(root "${WORK_DIR}/${CONSUMER_NAME}")
file(REMOVE_RECURSE "${root}")
file(MAKE_DIRECTORY "${root}")

foreach(component IN LISTS COMPONENTS)
  step("installing the ${component} component of ${BUILD_DIR}"
       "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --component ${component}
       --prefix "${root}/staged")
endforeach()

# What a plugin author and a pool user rely on.
foreach(f IN LISTS EXPECT_FILES)
  if(NOT EXISTS "${root}/staged/${f}")
    message(FATAL_ERROR "package test: ${f} is not installed under ${root}/staged")
  endif()
endforeach()
file(GLOB_RECURSE config_files "${root}/staged/*/tpoolConfig.cmake")
file(GLOB_RECURSE targets_files "${root}/staged/*/tpoolTargets.cmake")
if(NOT config_files OR NOT targets_files)
  message(FATAL_ERROR "package test: tpoolConfig.cmake or tpoolTargets.cmake is not installed "
                      "under ${root}/staged (found: '${config_files}' '${targets_files}')")
endif()
# POOL_AUTO: the pool consumer calls Pool::create/submit/wait when the
# installed library defines them (the pool's implementation has landed), and
# otherwise links only the Status code that the library already has.
if(POOL_AUTO)
  file(GLOB_RECURSE pool_lib "${root}/staged/*/libtpool_pool.a")
  execute_process(COMMAND nm -C --defined-only ${pool_lib} OUTPUT_VARIABLE symbols
                  RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0 OR NOT pool_lib)
    message(FATAL_ERROR "package test: cannot list the symbols of '${pool_lib}' with nm")
  endif()
  string(FIND "${symbols}" "tpool::Pool::create(" at)
  if(at EQUAL -1)
    message(STATUS "Pool::create is not in ${pool_lib} yet: the consumer links Status only")
    list(APPEND EXTRA_ARGS -DTPOOL_CONSUMER_RUNS_POOL=OFF)
    set(EXPECT "status: full: no free descriptor")
  else()
    list(APPEND EXTRA_ARGS -DTPOOL_CONSUMER_RUNS_POOL=ON)
    set(EXPECT "status: full: no free descriptor\ntask: completed counter=1")
  endif()
endif()

# The exported targets must not point back into the source or build tree.
file(READ "${targets_files}" targets_text)
foreach(tree "${SOURCE_DIR}" "${BUILD_DIR}")
  string(FIND "${targets_text}" "${tree}/" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "package test: ${targets_files} names ${tree}; exported paths must "
                        "be relative to the install prefix (use INSTALL_INTERFACE)")
  endif()
endforeach()

# Relocatable: consume from a different directory than the install prefix.
file(RENAME "${root}/staged" "${root}/prefix")

set(common_args
    -G "${GENERATOR}"
    "-DCMAKE_PREFIX_PATH=${root}/prefix"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
    -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
    "-DCMAKE_C_COMPILER=${C_COMPILER}"
    "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    "-DCMAKE_C_FLAGS=${C_FLAGS}"
    "-DCMAKE_EXE_LINKER_FLAGS=${LINKER_FLAGS}"
    "-DCMAKE_SHARED_LINKER_FLAGS=${LINKER_FLAGS}"
    "-DCMAKE_MODULE_LINKER_FLAGS=${LINKER_FLAGS}"
    "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")

step("configuring the consumer ${CONSUMER_NAME} with find_package(tpool)"
     "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${root}/build" ${common_args} ${EXTRA_ARGS})
step("building the consumer ${CONSUMER_NAME}" "${CMAKE_COMMAND}" --build "${root}/build")

if(EXPECT)
  step("running ${root}/build/${CONSUMER_NAME}" "${root}/build/${CONSUMER_NAME}")
  if(NOT step_output MATCHES "${EXPECT}")
    message(FATAL_ERROR "package test: ${CONSUMER_NAME} printed\n${step_output}\n"
                        "which does not match '${EXPECT}'")
  endif()
  message(STATUS "${CONSUMER_NAME}: ${step_output}")
endif()

# The version file must refuse a version this package is not: find_package
# of 99 fails to configure (proof that the check above could fail).
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${root}/build-v99"
                        ${common_args} ${EXTRA_ARGS} -DTPOOL_CONSUMER_VERSION=99
                RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "package test: find_package(tpool 99) succeeded against version "
                      "0.x; tpoolConfigVersion.cmake does not check versions")
endif()
if(NOT err MATCHES "tpoolConfig-?[Vv]ersion|version")
  message(FATAL_ERROR "package test: find_package(tpool 99) failed, but not for its "
                      "version:\n${err}")
endif()
file(REMOVE_RECURSE "${root}")
