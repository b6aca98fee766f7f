#pragma once
/// node_launcher: the body of `kvconnect launch`, a supervisor like torchrun's agent for one
/// node. It loads and checks the config (exit 2 and nothing started on any error), derives the
/// plan, starts the scheduler process (node 0), reads its "listening" line for the port, starts
/// one worker process per rank of the node, and then carries out supervision's orders
/// (supervision.hpp): signals forwarded, a child's unexpected exit noticed at once (pidfds),
/// every child waited for. At every exit no child is left (PR_SET_PDEATHSIG covers a launcher
/// that is killed) and no shm segment of the launch is left (the scheduler removes it; the
/// launcher removes one a killed scheduler left behind).
///
/// stdout carries the launcher's JSON lines: {"event":"started",...} once the processes run,
/// {"event":"ready",...} once every rank registered, and last {"event":"summary",...} with the
/// run's figures and the launch's own (ranks, restarts, wall_seconds, exit_code, reason). The
/// simulated engine's figures are the scheduler's "sim" line (run_report.hpp) with the workers'
/// load checks summed from their "runner" lines (loads_verified, load_mismatches,
/// step_errors); the smoke run's are steps, jobs_ok, slots_checked, bytes. The children's stdout lines are relayed to
/// stderr with their role in front; their logs go to stderr as they are.
///
/// Exit codes: 0 the run passed (the simulated engine: every worker reported, zero mismatches); 1 a failure; 2 a config error (nothing started);
/// 128 + signal when interrupted.
#include <cstdint>
#include <string>
#include <vector>

namespace kvc::launch {

struct launch_options {
  std::string file;  ///< empty: the embedded default
  std::vector<std::string> overrides;
  uint32_t node = 0;
  std::string binary;  ///< the kvconnect binary the children run
  /// "sim": the simulated engine (launch/sim_engine/); "smoke": the smoke run.
  std::string engine = "sim";
};

int run_launch(const launch_options& options);

}  // namespace kvc::launch
