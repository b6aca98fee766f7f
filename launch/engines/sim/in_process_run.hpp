#pragma once
/// in_process_run: the simulated engine with every rank in this process (what `kvconnect soak`
/// runs, and `kvconnect launch --compare`'s reference without offloading). One thread plays
/// the engine: the scheduler side (sim_scheduler over the embedding API's scheduler_connector,
/// the memory step transport, the node's pool in an shm segment) and, in turn, each rank's
/// model runner over its worker_connector.
///
/// A run: engine_loop.hpp's phases: `steps` steps with arrivals (workload_generator), the drain
/// (at most workload.drain_steps steps while what arrived finishes), and only past its bound the
/// aborts and at most drain_limit steps for their transfers. What is left then is reported as
/// hung or pending.
///
/// Injection points: the copy-engine factory (default: the deterministic manual copy engine,
/// every transfer completing in its step), a decorator of the step channel's server transport,
/// and a fault config (docs/faults.md): its channel faults act at the scheduler's end of the
/// step channel, its copy faults wrap each rank's copy engine and its fail_io faults fail each
/// rank's file tier jobs, as in separate processes.
///
/// Not thread-safe; run() blocks the caller until the run ended.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/embed/embed_config.hpp"
#include "cuda/copy_engine.hpp"
#include "launch/config/launch_config.hpp"
#include "launch/engines/sim/run_report.hpp"
#include "proto/fault_plan.hpp"
#include "proto/status.hpp"

namespace kvc::sim {

/// Makes rank r's copy engine.
using rank_engine_factory = std::function<result<std::unique_ptr<cuda::copy_engine>>(rank_id rank)>;

struct in_process_options {
  launch::launch_config config;  ///< a loaded (checked, resolved) config
  bool offload = true;           ///< false: no connector, no pool (the reference run)
  /// Names the pool's shm segment (/kvc-<uid>-<instance>-node0).
  std::string instance = "soak";
  rank_engine_factory make_copy_engine;  ///< unset: cuda::manual_copy_engine
  embed::transport_decorator wrap_transport;
  /// Channel, copy and fail_io faults; process faults are not for one process.
  fault_config faults;
  /// Every step's transfers complete in it (model_runner's finish_transfers).
  bool finish_transfers = true;
  uint32_t drain_limit = 1000;  ///< steps after the drain's aborts (loop_options::drain_limit)
  std::chrono::milliseconds step_timeout{10000};
};

/// Runs the workload; the report, or the error that kept it from starting (config, segment).
result<run_report> run_in_process(const in_process_options& options);

/// The reference of a comparison (`soak --compare`, `launch --compare`): the same workload
/// with offloading off (no connector, no pool, no segment).
result<run_report> run_without_offload(in_process_options options);
/// The same run with the CPU pool alone (offload.secondary_tiers cleared): what the file tier
/// adds beyond it (`kvconnect soak --compare` with a tier).
result<run_report> run_without_tier(in_process_options options);

}  // namespace kvc::sim
