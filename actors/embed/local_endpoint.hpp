#pragma once
/// local_endpoint: what an in-process worker_connector needs of the scheduler_connector it
/// joins: the shared actor system, the scheduler actor to register with, and the scheduler's
/// end of the step channel to connect to. Internal to actors/embed (not installed). Plain
/// handles; the transport pointer is valid while the scheduler connector is not shut down, and
/// connect_local may be called from another thread (ZeroMQ contexts and the memory transport's
/// hub are thread-safe).
#include <memory>

#include "actors/channel/transport.hpp"
#include "actors/embed/actor_host.hpp"
#include "actors/control/interfaces.hpp"

namespace kvc::embed {

struct local_endpoint {
  std::shared_ptr<actor_host> host;
  control::scheduler_actor scheduler;  ///< invalid once the scheduler connector shut down
  channel::server_transport* transport = nullptr;
};

}  // namespace kvc::embed
