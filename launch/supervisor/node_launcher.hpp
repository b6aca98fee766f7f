#pragma once
/// node_launcher: the body of `kvconnect launch`, a supervisor like torchrun's agent for one
/// node. It loads and checks the config (exit 2 and nothing started on any error, including a
/// multi-node launch without a token or a fixed runtime.port), removes the segments crashed runs
/// of this user left (shm/stale_segments.hpp), derives the plan, and starts the node's
/// processes: on node 0 the scheduler process first, whose "listening" line gives the port, then
/// one worker process per rank of the node; on any other node the node's segment (created here,
/// removed at the end) and its workers, which register with node 0's scheduler at
/// runtime.port and (simulated engine) subscribe to its executor channel at node 0's host and
/// the executor port (executor_port_of). The processes run in node_run (node_run.hpp: each
/// child gets the config on its stdin, node_processes.hpp, and talks in child events,
/// child_events.hpp), which carries out supervision's orders (supervision.hpp): signals
/// forwarded, a child's unexpected exit noticed at once (pidfds), a failed worker restarted with
/// its next incarnation under restart.policy on-failure, every child waited for. At every exit
/// no child is left (PR_SET_PDEATHSIG covers a launcher that is killed) and no shm segment of
/// the launch is left (the scheduler removes node 0's; the launcher removes one a killed
/// scheduler left).
///
/// stdout carries the launcher's JSON lines: {"event":"cleanup",...} when stale segments were
/// removed, {"event":"started",...} once the processes run, {"event":"ready",...} once every rank
/// registered, {"event":"restarted",...} / {"event":"rejoined",...} for a worker restarted and
/// registered again, and last {"event":"summary",...} with the run's figures and the launch's
/// own (ranks, restarts, first_step_seconds, wall_seconds, exit_code, reason). The simulated
/// engine's figures are the scheduler's "sim" line (run_report.hpp) with the workers' load
/// checks summed from their "runner" lines (loads_verified, load_mismatches, step_errors) and
/// the launch's connector share; another node's summary has its own workers' checks; the
/// smoke run's are steps, jobs_ok, jobs_failed, rounds_interrupted, slots_checked, bytes. The
/// children's stdout lines are relayed to stderr with their role in front; their logs go to
/// stderr as they are.
///
/// With --compare a {"event":"compare",...} line follows the summary.
///
/// With offload.enabled false (an engine whose traits allow it: the simulated engine) nothing
/// creates a pool or a segment: the scheduler runs the engine without a connector, the workers
/// its model on the executor channel alone and end with it; the summary's "segment" is null.
/// The engines that need offloading, injected faults, rank restarts and --compare are refused
/// (exit 2, offload_problem).
///
/// With injected faults (runtime.faults), a {"event":"fault_report",...} line comes before the
/// summary: the scheduler's report with the workers' copy faults and the launcher's process
/// faults added to "fired". Process faults (kill_rank, hang_rank, kill_scheduler) are carried out
/// by node 0's launcher after the step of the scheduler's {"event":"progress",...} lines
/// (process_faults.hpp; not relayed to stderr), each printed as {"event":"fault",...}; a worker
/// stopped for good is killed when the scheduler prints {"event":"rank_lost",...} for it; after
/// kill_scheduler no worker is signalled for runtime.connection_timeout_ms + stop_timeout_ms
/// (past it they are killed and the report's workers_exited_on_their_own is false).
///
/// Exit codes: 0 the run passed (the simulated engine: every worker reported, zero mismatches;
/// another node: the scheduler stopped its workers); 1 a failure (also a killed scheduler whose
/// invariants held); 2 a config error, or a process fault naming a rank not on node 0 (nothing
/// started); 3 the fault report's invariants failed; 128 + signal when interrupted.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/config/launch_config.hpp"

namespace kvc::launch {

struct launch_options {
  std::string file;  ///< empty: the embedded default
  std::vector<std::string> overrides;
  uint32_t node = 0;
  std::string binary;  ///< the kvconnect binary the children run
  /// "sim": the simulated engine (launch/engines/sim/); "smoke": the smoke run.
  std::string engine = "sim";
  /// The simulated engine on node 0: after the launch, run the same workload without
  /// offloading in this process (sim::run_without_offload), print both, the comparison's table
  /// and a {"event":"compare",...} line after the summary (run_comparison.hpp compare_json).
  bool compare = false;
  /// How --compare runs: given the config, the launch's summary and the scheduler's "finished"
  /// line (none when it did not print one), the "compare" line to print, or none with the error
  /// said. The caller passes it in (`kvconnect launch`: the simulated engine's reference run),
  /// so that the supervisor does not depend on the simulated engine. Needed with compare.
  std::function<std::optional<nlohmann::json>(const launch_config& config,
                                              const nlohmann::json& summary,
                                              const std::optional<nlohmann::json>& finished)>
      compare_run;
};

int run_launch(const launch_options& options);

}  // namespace kvc::launch
