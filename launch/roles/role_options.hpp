#pragma once
/// Options of the role processes (`kvconnect scheduler`, `kvconnect worker`) and the flags they
/// share. Both sides derive the node's pool from the same options (topology, instance, slots,
/// the KV cache shape), so the layout checksum a worker registers with equals the segment's only
/// when the two were started with the same configuration. The options come from one launch
/// config (--config: node_processes.hpp maps it, the way `kvconnect launch` starts its
/// children) or from the built-in defaults; every flag given on the command line overrides
/// what they say (role_flags.hpp). Plain data, no CAF.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/embed/embed_config.hpp"
#include "launch/config/launch_config.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/config/synthetic_kv_spec.hpp"
#include "launch/roles/engine_traits.hpp"
#include "proto/defaults.hpp"
#include "proto/status.hpp"
#include "shm/pool_geometry.hpp"

namespace kvc::launch {

using topology_options = embed::topology_config;

/// The file tier behind the pool (offload.secondary_tiers[0], docs/disk_tier.md) as flags both
/// roles take alike; without --tier-root-dir: no tier.
struct tier_options {
  /// The flags bind to these fields; no root_dir: no tier. direct_io follows no_direct_io.
  embed::file_tier_config tier;
  bool no_direct_io = false;

  /// The flags that give `t` (the plan's tier, launch_plan.hpp).
  static tier_options of(const embed::file_tier_config& t) { return {t, !t.direct_io}; }
  /// The facades' tier; none without a root_dir.
  std::optional<embed::file_tier_config> config() const {
    if (tier.root_dir.empty()) return std::nullopt;
    embed::file_tier_config c = tier;
    c.direct_io = !no_direct_io;
    return c;
  }
};

struct pool_options {
  /// names the segment: /kvc-<uid>-<instance>-node<node>
  std::string instance = defaults::instance;
  uint32_t slots = 64;               ///< CPU slots per rank
  synthetic_kv_spec kv;              ///< the shape of one offloaded block
  tier_options tier;
};

/// What both sides derive from topology + pool flags.
struct pool_plan {
  std::string segment;
  shm::pool_geometry geometry;
  uint64_t layout_checksum = 0;
};

/// Validates the options (sizes, KV shape, world size, the instance name's characters) and
/// derives the plan. errc::invalid_argument naming the flag otherwise.
result<pool_plan> derive_pool(const topology_options& topo, const pool_options& pool);

/// How long the scheduler waits for every rank to register: `ready_timeout_ms` plus the time
/// a worker may spend faulting in and pinning its region before it registers, counted at a
/// conservative 1 GiB/s (100 GB of pool: 100 s more), so that a large pool does not outlast a
/// timeout sized for a small one.
inline std::chrono::milliseconds ready_timeout_for(uint32_t ready_timeout_ms,
                                                   uint64_t rank_region_bytes) {
  constexpr uint64_t bytes_per_ms = (uint64_t{1} << 30) / 1000;  // 1 GiB/s
  return std::chrono::milliseconds{uint64_t{ready_timeout_ms} + rank_region_bytes / bytes_per_ms};
}

struct network_options {
  uint32_t heartbeat_ms = defaults::heartbeat_ms;
  uint32_t connection_timeout_ms = defaults::connection_timeout_ms;
  /// The facades' network settings for `host` and `port`.
  embed::network_config facade(const std::string& host, uint16_t port) const;
};

/// --fault SPEC (repeatable) and --fault-seed N (docs/faults.md).
struct fault_options {
  std::vector<std::string> specs;
  uint64_t seed = 0;
};

/// --trace DIR and --trace-level: observe.trace / observe.trace_dir of a role process.
struct trace_options {
  std::string dir;                 ///< empty: no trace
  std::string level = "messages";  ///< messages | jobs (with --trace)
  /// The facades' observe config: off without a directory.
  embed::observe_config observe() const;
};

/// What a role process was started with under --config: the launch config and its plan.
struct config_input {
  launch_config config;
  launch_plan plan;
};

struct scheduler_process_options {
  topology_options topology;
  pool_options pool;
  /// offload.enabled: false runs the engine without offloading: no connector, no pool, no
  /// segment (only an engine that can, engine_traits::needs_offload; no injected faults).
  bool offload = true;
  network_options network;
  std::string token;
  std::string host = defaults::host;  ///< the address to listen on
  uint16_t port = 0;  ///< 0: any free port (printed in the "listening" line)
  bool prefault = false;
  /// a job's deadline after its step; 0: none by time
  uint32_t job_timeout_ms = defaults::job_timeout_ms;
  /// a job's deadline in later steps; 0: none by steps
  uint32_t job_timeout_steps = defaults::job_timeout_steps;
  /// The engine this process runs (launch/engines/engine.hpp; --engine): serve until
  /// SIGINT/SIGTERM; the smoke run of smoke_steps store/load steps (the pool's bytes checked,
  /// then the workers stopped; exit 0 when every job succeeded and every check passed); the
  /// simulated engine on `config` (every rank registered and subscribed to the executor
  /// channel, it runs the workload's steps, prints {"event":"sim",...} and stops the workers).
  engine_kind engine = engine_kind::serve;
  /// The smoke run's steps (--smoke-steps; with --config: workload.steps).
  uint32_t smoke_steps = 0;
  /// Set with --config: the launch config and its plan (the simulated engine's workload).
  std::optional<config_input> config;
  /// smoke / sim: how long to wait for every rank
  uint32_t ready_timeout_ms = defaults::ready_timeout_ms;
  /// smoke / sim: how long one step's output may take; above job_timeout_ms (step_wait_problem)
  uint32_t step_timeout_ms = defaults::step_timeout_ms;
  uint32_t stop_timeout_ms = defaults::stop_timeout_ms;  ///< how long stopping the workers may take
  /// Smoke: after the steps, keep serving (metrics, KV-event replay) until SIGINT/SIGTERM.
  bool serve_after_smoke = false;
  uint16_t metrics_port = 0;              ///< GET /metrics on host:metrics_port; 0: off
  std::string kv_events_endpoint;         ///< ZeroMQ PUB bind address; empty: off
  std::string kv_events_replay_endpoint;  ///< ROUTER bind address; empty: no replay
  std::string kv_events_topic;
  std::string record_dir;  ///< observe.record: the run's record goes here; empty: off
  /// Injected faults: the channel's apply at this end of the step channel, the others are
  /// ignored; with any, the run ends with a fault_report line.
  fault_options faults;
  /// Smoke: a rank may be lost and come back (restart.policy on-failure): a job failed by the
  /// loss is counted, not a failure, and the run waits for the rank (smoke_engine.hpp).
  bool rank_restarts = false;
  /// Several nodes: the node of every rank (empty: every rank on this node). The scheduler
  /// serves every node's workers; the smoke run checks the slots of this node's ranks only
  /// (the others write into their own node's segment).
  std::vector<uint32_t> rank_nodes;
  trace_options trace;
};

struct worker_process_options {
  topology_options topology;
  pool_options pool;
  /// offload.enabled: false: no worker_connector, no pool: the rank runs its engine's model
  /// alone (the simulated engine's forward passes) on its own copy engine.
  bool offload = true;
  network_options network;
  std::string token;
  std::string host = defaults::host;
  uint16_t port = 0;
  uint32_t rank = 0;  ///< global rank; tp_rank = rank % tp_size, pp_rank = rank / tp_size
  uint32_t incarnation = 0;
  std::string backend = defaults::backend;
  int device = 0;
  bool prefault = true;
  uint32_t register_timeout_ms = defaults::register_timeout_ms;
  /// Injected faults: this rank's copy faults wrap its copy engine, the others are ignored.
  fault_options faults;
  /// Non-empty: run the simulated engine's model runner, taking each step's model input from
  /// the scheduler's executor channel at this endpoint; prints {"event":"runner",...} (its
  /// load checks) when it ends. Empty: the synthetic cache, no forward pass.
  std::string executor;
  /// tokens per GPU block (the model runner's slots)
  uint32_t gpu_block_size = defaults::gpu_block_size;
  trace_options trace;
};

}  // namespace kvc::launch
