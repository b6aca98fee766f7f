#pragma once
/// node_run: the processes of one node of a launch, from the first start to the last exit. On
/// node 0 it starts the scheduler process, whose "listening" line gives the port; on another
/// node the workers start at once (node 0's fixed runtime.port). Each child is started with the
/// launch's config on its stdin (node_processes.hpp) and read as child events
/// (child_events.hpp): it relays them to stderr (child_lines.hpp), keeps what they report
/// (child_reports.hpp), carries out supervision's orders (supervision.hpp: signals forwarded, a
/// child's unexpected exit noticed at once through its pidfd, a failed worker restarted with
/// its next incarnation under restart.policy on-failure) and the config's process faults after
/// the scheduler's progress lines (process_faults.hpp). It prints the launcher's "started",
/// "ready", "restarted", "rejoined", "device_lost" and "fault" lines.
///
/// Owns its children: none is left when it is destroyed. Not thread-safe: the launcher's
/// thread runs it.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/config/launch_config.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/supervisor/child_reports.hpp"
#include "launch/supervisor/process_faults.hpp"
#include "launch/supervisor/supervision.hpp"

namespace kvc::launch {

class node_run {
 public:
  /// `node`: the node this launch runs (the scheduler runs on node 0 only), `ranks` its ranks;
  /// `binary`: the kvconnect binary the children run, with `env` (child_environment.hpp).
  /// `engine`: the engine the scheduler runs (engine_traits.hpp: smoke or sim). `config` and
  /// `plan` must outlive the run.
  node_run(const launch_config& config, const launch_plan& plan, uint32_t node,
           std::vector<rank_id> ranks, std::string binary, std::vector<std::string> env,
           engine_kind engine, process_fault_schedule process_faults, uint64_t fault_seed);
  ~node_run();
  node_run(const node_run&) = delete;
  node_run& operator=(const node_run&) = delete;

  /// Runs until every child is gone; the launch's exit code.
  int run(signal_watcher& signals);

  const supervision& outcome() const;
  /// The scheduler process this launch started (node 0); -1 when none started.
  pid_t scheduler_pid() const;
  /// When the scheduler said every rank is ready (registered, or without offloading subscribed to
  /// the executor channel): its first step follows at once.
  const std::optional<std::chrono::steady_clock::time_point>& ready_at() const;
  /// What the children reported.
  child_reports& reports();
  /// The run's fault report (child_reports::fault_report with the process faults carried out).
  std::optional<nlohmann::json> fault_report() const;

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::launch
