#pragma once
/// local_endpoint: what an in-process worker_connector needs of the scheduler_connector it joins:
/// the shared actor system, the scheduler actor to register with, and the data plane. Internal to actors/embed
/// (not installed). Plain handles: copyable, thread-safe to read.
#include <memory>

#include <string>

#include "actors/embed/actor_host.hpp"
#include "actors/runtime/data_plane.hpp"
#include "actors/runtime/interfaces.hpp"

namespace kvc::embed {

struct local_endpoint {
  std::shared_ptr<actor_host> host;
  runtime::scheduler_actor scheduler;  ///< invalid once the scheduler connector shut down
  /// The ZeroMQ data plane's inproc endpoint and its context; empty / null with the CAF one.
  std::string data_endpoint;
  std::shared_ptr<runtime::data_plane_context> data_context;
};

}  // namespace kvc::embed
