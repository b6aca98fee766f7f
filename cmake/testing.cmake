# kvc_add_test(<name> SOURCES <files...> LIBS <targets...> LABEL <unit|actors|multiproc|gpu>
#              [TIMEOUT <seconds>] [GPU_FILTER <gtest pattern>])
# One GoogleTest executable; each TEST becomes a CTest test carrying the label (and the CTest
# TIMEOUT, a safety net for tests that wait on other processes; default: CTest's).
# GPU_FILTER: the tests matching the pattern (e.g. the cuda instances of a contract suite) are
# registered apart, under label `gpu`; the rest keep LABEL. They skip without a device, or fail
# when the environment sets KVC_REQUIRE_GPU=1.
function(kvc_add_test name)
  cmake_parse_arguments(T "" "LABEL;TIMEOUT;GPU_FILTER" "SOURCES;LIBS" ${ARGN})
  if(NOT T_LABEL)
    set(T_LABEL unit)
  endif()
  set(T_TIMEOUT_PROP)
  if(T_TIMEOUT)
    set(T_TIMEOUT_PROP TIMEOUT ${T_TIMEOUT})
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  set(T_FILTER)
  if(T_GPU_FILTER)
    set(T_FILTER TEST_FILTER "-${T_GPU_FILTER}")
    gtest_discover_tests(${name}
      TEST_FILTER "${T_GPU_FILTER}"
      PROPERTIES LABELS gpu ${T_TIMEOUT_PROP}
      DISCOVERY_TIMEOUT 60
      WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  gtest_discover_tests(${name}
    ${T_FILTER}
    PROPERTIES LABELS ${T_LABEL} ${T_TIMEOUT_PROP}
    DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endfunction()
