#pragma once
/// How every kvconnect process configures its CAF actor system: the message types it can
/// send across processes (registered under the same names everywhere), the "kvc" error
/// category, and the system preset (work-sharing scheduler with 2 threads, middleman
/// heartbeats + connection timeout, CAF's log file off). Call before constructing the
/// caf::actor_system:
///
///   caf::actor_system_config cfg;
///   kvc::control::configure(cfg, {}, /*network=*/true);
///   caf::actor_system sys{cfg};
///
/// The preset sets values with cfg.set, so a later cfg.parse(argc, argv) can still override
/// them (mind the cfg.parse pitfalls in caf_primer.md). Stateless, thread-safe.
#include <chrono>
#include <cstddef>
#include <string>

#include <caf/fwd.hpp>

#include "proto/defaults.hpp"

namespace kvc::control {

struct system_options {
  /// Scheduler threads. The work-sharing policy wakes a thread in microseconds, where the
  /// default work-stealing one takes ~80-210 us to pick up a message from outside (primer §3).
  size_t max_threads = 2;
  /// Heartbeats to every peer and the silence after which a peer counts as lost. Must be set
  /// in every process: a timeout on one side with heartbeats off on the other drops healthy
  /// idle peers.
  std::chrono::milliseconds heartbeat_interval{defaults::heartbeat_ms};
  std::chrono::milliseconds connection_timeout{defaults::connection_timeout_ms};
  /// Address that caf::io::publish binds (pass it as publish's `in` argument): loopback only.
  std::string bind_address = defaults::host;
  /// BASP application identifier: nodes with different identifiers refuse to connect.
  std::string app_identifier = "kvconnect/1";
};

/// Registers every kvconnect message type (proto/ structs, id vectors, actor handles) and the
/// "kvc" error category with its renderer.
void add_message_types(caf::actor_system_config& cfg);

/// Applies the preset: scheduler.policy = sharing, scheduler.max-threads, middleman
/// heartbeat-interval, connection-timeout, app-identifiers, CAF's file log off.
void apply_preset(caf::actor_system_config& cfg, const system_options& opts);

/// Loads caf::io::middleman (needed to publish or reach actors of other processes).
void load_network(caf::actor_system_config& cfg);

/// add_message_types + apply_preset, and load_network when `network`.
void configure(caf::actor_system_config& cfg, const system_options& opts, bool network);

}  // namespace kvc::control
