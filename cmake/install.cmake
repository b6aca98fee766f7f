# Installation of the embedding library. `cmake --install <build> --prefix P` (component "embed")
# puts libkvconnect.a and the static libraries it is made of under P/lib, the public headers
# under P/include/kvconnect (repository layout, so `#include "actors/embed/..."` works), and a
# CMake package under P/lib/cmake/kvconnect. An engine then does:
#   find_package(kvconnect REQUIRED)
#   target_link_libraries(engine PRIVATE kvconnect::kvconnect)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# kvconnect::kvconnect and everything it links (exported too, as kvconnect::kvc_*).
set(KVC_EXPORTED_LIBS
  kvc_embed
  kvc_proto kvc_shm kvc_copy
  kvc_control kvc_channel kvc_trace
  kvc_coordinator_core kvc_coordinator
  kvc_scheduler_core kvc_scheduler_registry kvc_scheduler_actor
  kvc_worker_core kvc_disk
  kvc_metrics_core kvc_metrics_server kvc_httplib kvc_kv_events_core kvc_kv_events kvc_record)
if(TARGET kvc_copy_cuda)
  list(APPEND KVC_EXPORTED_LIBS kvc_copy_cuda)
endif()

install(TARGETS ${KVC_EXPORTED_LIBS}
  EXPORT kvconnectTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT embed
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT embed)
install(EXPORT kvconnectTargets
  NAMESPACE kvconnect::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvconnect
  COMPONENT embed)

# The public headers: the facades and the plain vocabulary they use (no CAF, no Boost).
set(KVC_PUBLIC_HEADERS
  actors/embed/embed_config.hpp
  actors/embed/engine.hpp
  actors/embed/scheduler_connector.hpp
  actors/embed/worker_connector.hpp
  actors/embed/worker_step.hpp
  actors/scheduler/planner_config.hpp
  actors/scheduler/file_tier_ledger.hpp
  actors/trace/trace_record.hpp
  actors/worker/tier_io_stats.hpp
  actors/scheduler/planner.hpp
  actors/scheduler/manager_config.hpp
  actors/scheduler/offload_manager.hpp
  cuda/copy_engine.hpp
  cuda/kv_layout.hpp
  proto/block_key.hpp
  proto/completion.hpp
  proto/connector_metadata.hpp
  proto/defaults.hpp
  proto/errc.hpp
  proto/exact_double.hpp
  proto/fault_plan.hpp
  proto/ids.hpp
  proto/kv_event.hpp
  proto/status.hpp
  proto/topology.hpp)
foreach(header IN LISTS KVC_PUBLIC_HEADERS)
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header}
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvconnect/${dir}
    COMPONENT embed)
endforeach()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvconnectConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/kvconnectConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvconnect)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/kvconnectConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/kvconnectConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/kvconnectConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kvconnect
  COMPONENT embed)
