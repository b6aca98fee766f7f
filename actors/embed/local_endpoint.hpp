#pragma once
/// local_endpoint: what an in-process worker_connector needs of the scheduler_connector it joins:
/// the shared actor system and the scheduler actor to register with. Internal to actors/embed
/// (not installed). Plain handles: copyable, thread-safe to read.
#include <memory>

#include "actors/embed/actor_host.hpp"
#include "actors/runtime/interfaces.hpp"

namespace kvc::embed {

struct local_endpoint {
  std::shared_ptr<actor_host> host;
  runtime::scheduler_actor scheduler;  ///< invalid once the scheduler connector shut down
};

}  // namespace kvc::embed
