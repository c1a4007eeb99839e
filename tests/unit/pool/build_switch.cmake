# One build-time switch configuration of the pool (docs/algorithms.md,
# "Testing the pool"): configure a sub-build of this source tree with the
# switch, build only the pool and its unit and fuzz tests, and run them. Tests
# that need another scheduler variant skip themselves (Config::validate names
# TPOOL_SCHEDULER_VARIANT). The sub-build directory is kept, so later runs are
# incremental (and ccache serves the rest).
#
# cmake -DSRC=<source> -DBIN=<dir> -DSWITCH=<-DX=Y[,-DZ=W...]> -DBUILD_TYPE=<t>
#       -DCXX_FLAGS=<flags> -DLINK_FLAGS=<flags> -P build_switch.cmake
foreach(v SRC BIN SWITCH)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "build_switch.cmake: ${v} is not set")
  endif()
endforeach()

string(REPLACE "," ";" switches "${SWITCH}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -S "${SRC}" -B "${BIN}" -G Ninja
          -DTPOOL_BUILD_DAEMON=OFF -DTPOOL_WERROR=ON -DTPOOL_POOL_SWITCH_SUBBUILD=ON
          "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
          "-DCMAKE_C_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}"
          ${switches}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the sub-build with ${SWITCH} failed (${rc})")
endif()

execute_process(
  COMMAND "${CMAKE_COMMAND}" --build "${BIN}" --target pool_unit_test pool_fuzz_test -j 2
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the pool tests with ${SWITCH} failed (${rc})")
endif()

foreach(exe tests/unit/pool/pool_unit_test tests/fuzz/pool/pool_fuzz_test)
  # The fuzz families get 1 s each here (3 s in the main build's ctest).
  execute_process(COMMAND "${CMAKE_COMMAND}" -E env TPOOL_FUZZ_SECONDS=1 "${BIN}/${exe}"
                          --gtest_brief=1 RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${exe} failed with ${SWITCH} (exit ${rc})")
  endif()
endforeach()
message(STATUS "pool tests pass with ${SWITCH}")
