# kvc_add_test(<name> SOURCES <files...> LIBS <targets...> LABEL <unit|actors|multiproc|gpu>
#              [TIMEOUT <seconds>])
# One GoogleTest executable; each TEST becomes a CTest test carrying the label (and the CTest
# TIMEOUT, a safety net for tests that wait on other processes; default: CTest's).
function(kvc_add_test name)
  cmake_parse_arguments(T "" "LABEL;TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT T_LABEL)
    set(T_LABEL unit)
  endif()
  set(T_PROPS LABELS ${T_LABEL})
  if(T_TIMEOUT)
    list(APPEND T_PROPS TIMEOUT ${T_TIMEOUT})
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name}
    PROPERTIES ${T_PROPS}
    DISCOVERY_TIMEOUT 60
    WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
endfunction()
