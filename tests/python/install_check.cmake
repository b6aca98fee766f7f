# `cmake --install BUILD --component python --prefix PREFIX` installs a package that this Python
# imports from PREFIX/DIR (and nowhere else); PREFIX is removed afterwards.
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --component python --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "cmake --install --component python failed: ${rc}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env PYTHONPATH=${PREFIX}/${DIR} ${PYTHON} -c
    "import kvconnect, kvconnect.vllm; assert kvconnect.__file__.startswith('${PREFIX}/'), kvconnect.__file__; print(kvconnect.__version__)"
  RESULT_VARIABLE rc)
file(REMOVE_RECURSE ${PREFIX})
if(rc)
  message(FATAL_ERROR "the installed kvconnect does not import: ${rc}")
endif()
