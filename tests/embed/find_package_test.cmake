# CTest driver (cmake -P): install kvconnect's "embed" component from BUILD_DIR into a fresh
# prefix under WORK_DIR, configure and build find_package_project against that prefix only,
# and run the program it builds. Any failing step fails the test with its output.
foreach(var BUILD_DIR PROJECT_DIR WORK_DIR GENERATOR EXAMPLE_SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "find_package_test: ${var} is not set")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix}
    --component embed)
# Only the public headers are installed: CAF, Boost and the actors stay inside the library.
file(GLOB_RECURSE installed RELATIVE ${prefix}/include ${prefix}/include/*)
foreach(h IN LISTS installed)
  if(h MATCHES "caf|control/|channel/|actor_host|_host.hpp|local_endpoint|scheduler_actor|coordinator/")
    message(FATAL_ERROR "an internal header was installed: ${h}")
  endif()
endforeach()
if(NOT EXISTS ${prefix}/include/kvconnect/actors/embed/scheduler_connector.hpp)
  message(FATAL_ERROR "the facade headers were not installed")
endif()

run("configure" ${CMAKE_COMMAND} -S ${PROJECT_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DKVC_EXAMPLE_SOURCE=${EXAMPLE_SOURCE})
run("build" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("the consumer" ${WORK_DIR}/build/consumer_engine)
if(NOT last_output MATCHES "example engine: ok")
  message(FATAL_ERROR "the consumer did not report success:\n${last_output}")
endif()
message(STATUS "find_package(kvconnect) consumer built and ran:\n${last_output}")
