#pragma once
/// engine_loop: the simulated engine's scheduler loop over the embedding API's
/// scheduler_connector, shared by the in-process run (every rank's model runner called in
/// turn) and the scheduler process of `kvconnect launch` (the model input published on the
/// executor channel to the worker processes). Per step: arrivals, sim_scheduler::schedule,
/// build_connector_meta, run_model(the step's model input), update_connector_output(step),
/// the job results counted, sim_scheduler::complete, follow-up turns. Three phases:
///   arrivals  steps 1..workload.steps: first turns arrive, finished turns bring follow-ups;
///   drain     at most workload.drain_steps more steps without arrivals or follow-ups: what
///             arrived runs to its end;
///   settle    only when the drain's bound came first: every request left is aborted (counted
///             in requests_aborted; an aborted request enters neither TTFT nor throughput) and
///             steps go on, at most drain_limit, until their stores and loads ended.
/// The run ends at the first step of the drain or settle phase that finds no request left and
/// no job in flight.
///
/// A lost rank: before each step the loop compares scheduler_connector::ranks_changed() with
/// the changes it handled; on a new loss or restart it runs await_ranks (no step runs until
/// every rank is back; an error ends the run with it as the reason) and then resets the GPU
/// cache (sim_scheduler::lose_gpu_cache): the restarted rank's GPU KV is gone.
///
/// Not thread-safe: the engine's scheduler thread runs it. Borrows what it is given.
#include <chrono>
#include <functional>

#include "actors/embed/scheduler_connector.hpp"
#include "launch/config/launch_config.hpp"
#include "launch/engines/sim/run_report.hpp"
#include "launch/engines/sim/sim_scheduler.hpp"

namespace kvc::sim {

struct loop_options {
  /// Steps of the settle phase (after the aborts) at most.
  uint32_t drain_limit = 1000;
  /// Above the coordinator's job deadline (30 s by default), which releases a step whose report
  /// was lost: a shorter wait would end the run where the deadline fails the step's jobs.
  std::chrono::milliseconds step_timeout{60000};
  /// Wait up to step_timeout for each step's output (worker processes: the reports travel over
  /// the network). False: take what has arrived. In one process every report of a step that will
  /// arrive has arrived once the ranks ran it, so the run waits on no clock and, with deadlines
  /// in steps only (runtime.job_timeout_ms 0), the same seeds give the same run.
  bool await_output = true;
  uint64_t offloaded_block_bytes = 0;  ///< one offloaded block over every rank (blocks counted)
  /// Runs the step's model on every rank; returns the wall time spent in connector calls of the
  /// ranks, in ns (0 when not measured). A failure ends the run (it is a problem of the report).
  std::function<result<double>(const model_input&)> run_model;
  /// The clock (ns) the scheduler's connector calls are timed with; unset: the steady clock
  /// (wall time). A scheduler whose ranks run in other processes passes its thread's CPU clock:
  /// update_connector_output's wait for their reports is their time, not its connector's.
  std::function<double()> connector_clock_ns;
  /// Called once per step with its number, after it completed (progress lines).
  std::function<void(const run_report&)> on_step;
  /// After a rank was lost or restarted, before the next step: returns once every rank is back
  /// and can take the next step (null: nothing to wait for). An error ends the run.
  std::function<status()> await_ranks;
};

/// Runs the workload of `config` with `sc` (null: offloading off). Fills every field of the
/// report except the ranks' (loads_verified, load_mismatches, step_errors, rank_jobs_known).
run_report run_engine_loop(const launch::launch_config& config, embed::scheduler_connector* sc,
                           const loop_options& options);

/// The engine limits a config gives.
engine_limits limits_of(const launch::launch_config& config);

}  // namespace kvc::sim
