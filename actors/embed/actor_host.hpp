#pragma once
/// actor_host: one CAF actor system with kvconnect's system preset (message types, work-sharing
/// scheduler, heartbeats; actors/control/system_config.hpp), shared by the facades of a process
/// that use it: a scheduler_connector and the in-process worker_connectors registered with it
/// hold it through a std::shared_ptr. Internal to actors/embed (not installed).
///
/// The last owner destroys it; ~actor_system waits until every actor ended, so owners end their
/// long-lived actors (anon_send_exit) before letting go. Thread-safe: system() may be used from
/// any thread.
#include <memory>

#include <caf/fwd.hpp>

#include "actors/embed/embed_config.hpp"

namespace kvc::embed {

class actor_host {
 public:
  /// Starts an actor system; `network` loads the middleman (publish / remote_actor).
  static std::shared_ptr<actor_host> start(const network_config& net, bool network);

  actor_host(const actor_host&) = delete;
  actor_host& operator=(const actor_host&) = delete;
  ~actor_host();

  caf::actor_system& system() noexcept { return *sys_; }
  bool has_network() const noexcept { return network_; }

 private:
  actor_host() = default;

  // Declaration order: the system is destroyed before the config it refers to.
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  bool network_ = false;
};

}  // namespace kvc::embed
