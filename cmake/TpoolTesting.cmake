# tpool_add_gtest(<name> SOURCES ... [LIBS ...] LABELS <unit|stress|model|integration> [TIMEOUT s])
#
# One GoogleTest executable, its cases registered with CTest one by one
# (discovered when the test runs, not at build time, so a TSan or cross build
# never runs test binaries during the build).
include(GoogleTest)
find_package(GTest REQUIRED)

function(tpool_add_gtest name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock tpool::warnings)
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
endfunction()

# tpool_add_gtest_variant(<target> PREFIX <prefix> ENVIRONMENT <VAR=VALUE>... [LABELS ...] [TIMEOUT s])
#
# The cases of an existing tpool_add_gtest executable registered once more,
# named <prefix><Suite.Case> and run with the given environment: e.g. the
# daemon's integration suites over TLS with auth on (TPOOL_IT_SECURE=1,
# tests/integration/daemon/daemon_process.h).
function(tpool_add_gtest_variant target)
  cmake_parse_arguments(T "" "TIMEOUT;PREFIX" "ENVIRONMENT;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       TEST_PREFIX "${T_PREFIX}"
                       PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
                                  ENVIRONMENT "${T_ENVIRONMENT}")
endfunction()

# tpool_test_without_openssl_atexit(<target>...)
#
# Links tests/integration/openssl_no_atexit.cc into each target: OpenSSL's
# exit-time cleanup off in a test process that talks TLS through gRPC (the
# file says why).
function(tpool_test_without_openssl_atexit)
  foreach(t IN LISTS ARGN)
    target_sources(${t} PRIVATE "${PROJECT_SOURCE_DIR}/tests/integration/openssl_no_atexit.cc")
    target_link_libraries(${t} PRIVATE tpool::security)
  endforeach()
endfunction()
