# CTest driver (cmake -P): runs PROGRAM with ARGS (a ;-list) and passes only when it exits
# non-zero and its standard output matches EXPECT: a failure that is reported, not just any exit.
foreach(var PROGRAM EXPECT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "expect_failure: ${var} is not set")
  endif()
endforeach()
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ${ARGS} exited 0, expected a failure:\n${out}\n${err}")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR
    "${PROGRAM} ${ARGS} failed (${rc}) without saying \"${EXPECT}\":\n${out}\n${err}")
endif()
message(STATUS "${PROGRAM} ${ARGS} failed as expected (${rc}):\n${out}")
