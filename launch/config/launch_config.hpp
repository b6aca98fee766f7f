#pragma once
/// launch_config: what `kvconnect launch` starts, as one plain struct with every section of the
/// config file (docs/config.md) and its built-in defaults. The offload section keeps vLLM's
/// `kv_connector_extra_config` names for the OffloadingConnector (cpu_bytes_to_use, block_size,
/// eviction_policy, store_threshold, max_tracker_size).
///
/// A default-constructed launch_config is the embedded default: one node (`node0` on
/// 127.0.0.1), TP=2, PP=1, the sim backend. Two fields are resolved by the loader
/// (config_loader.hpp) once every source is merged, so that a loaded config is always explicit:
/// an empty `topology.placement` becomes "fill the nodes in order" and `offload.block_size` 0
/// becomes `kv_cache.gpu_block_size`.
///
/// The defaults that other layers share (timeouts, heartbeat, GPU block size, host, backend) are
/// written once, in proto/defaults.hpp.
///
/// Plain data: no I/O, thread-safe to copy and read.
#include <cstdint>
#include <string>
#include <vector>

#include "proto/defaults.hpp"

namespace kvc::launch {

struct node_config {
  std::string name = "node0";
  std::string host = defaults::host;
  uint64_t shm_bytes = 0;  ///< the node's shm budget for its segment; 0: not checked
  friend bool operator==(const node_config&, const node_config&) = default;
};

struct restart_config {
  std::string policy = "never";  ///< never | on-failure
  uint32_t limit = 3;            ///< restarts per rank
  friend bool operator==(const restart_config&, const restart_config&) = default;
};

struct topology_section {
  std::vector<node_config> nodes{node_config{}};
  uint32_t tensor_parallel = 2;
  uint32_t pipeline_parallel = 1;
  /// Node name of every global rank (rank = pp_rank * tensor_parallel + tp_rank).
  std::vector<std::string> placement;
  std::string backend = defaults::backend;  ///< sim | cuda
  restart_config restart;
  friend bool operator==(const topology_section&, const topology_section&) = default;
};

/// The model's KV cache on the GPUs: the bytes of one GPU block follow from it.
struct kv_cache_section {
  uint32_t layers = 8;
  uint32_t kv_heads = 8;  ///< split over tensor_parallel ranks (replicated when fewer)
  uint32_t head_dim = 64;
  uint32_t dtype_bytes = 2;
  /// Bytes of one GPU block of one layer on one rank (K and V together); 0: derived as
  /// 2 * gpu_block_size * heads per rank * head_dim * dtype_bytes. An engine that embeds
  /// kvconnect sets it from its own KV tensors (kvconnect.vllm: vLLM's kv_cache_config).
  uint64_t page_bytes = 0;
  uint32_t gpu_block_size = defaults::gpu_block_size;  ///< tokens per GPU block
  /// Tokens per request block hash (vLLM's cache_config.block_size, the granularity of a
  /// request's block_hashes); 0: gpu_block_size. Must divide gpu_block_size.
  uint32_t hash_block_size = 0;
  uint32_t gpu_blocks = 256;          ///< GPU blocks per rank
  std::string layout = "flash_attn";  ///< flash_attn | flashinfer | cross_layer
  /// vLLM's enable_prefix_caching: the GPU prefix cache (and the planner's delay rule) is on.
  bool enable_prefix_caching = true;
  friend bool operator==(const kv_cache_section&, const kv_cache_section&) = default;
};

/// One tier behind the CPU pool (vLLM main's `secondary_tiers` entry). Only `type: fs` exists:
/// block files under root_dir (docs/disk_tier.md).
struct secondary_tier_config {
  std::string type = "fs";
  std::string root_dir;               ///< required; must exist, be a directory and be writable
  uint64_t capacity_bytes = 0;        ///< required; what the tier's files may take
  uint32_t n_read_threads = 16;       ///< promotions and lookups (vLLM's default)
  uint32_t n_write_threads = 16;      ///< cascades and removals (vLLM's default)
  uint32_t max_pending_cascades = 1024;  ///< back-pressure: cascades in flight at most
  bool direct_io = true;              ///< O_DIRECT where the file system takes it
  /// auto | io_uring | threads (disk::io_engine): auto takes io_uring where the kernel allows it.
  std::string io_engine = "auto";
  uint32_t io_depth = 4;  ///< io_uring: block I/Os in flight per ring (one ring per thread)
  friend bool operator==(const secondary_tier_config&, const secondary_tier_config&) = default;
};

/// vLLM's kv_connector_extra_config of the OffloadingConnector.
struct offload_section {
  bool enabled = true;                      ///< false: no connector, no pool
  uint64_t cpu_bytes_to_use = 256ull << 20;  ///< the CPU pool, total over all ranks
  uint32_t block_size = 0;                  ///< tokens per offloaded block; 0: gpu_block_size
  std::string eviction_policy = "lru";      ///< lru | arc
  uint32_t store_threshold = 0;             ///< 0: reuse filter off; >= 2 enables it
  uint32_t max_tracker_size = 64000;        ///< the reuse filter's tracker capacity
  std::vector<secondary_tier_config> secondary_tiers;  ///< tiers behind the pool, in order
  friend bool operator==(const offload_section&, const offload_section&) = default;
};

struct runtime_section {
  std::string host = defaults::host;  ///< where the scheduler listens
  uint32_t port = 0;               ///< 0: a free port
  /// The simulated engine's executor channel, bound on the scheduler's host (topology.nodes[0]
  /// .host with several nodes); 0: runtime.port + 1 when port is fixed, else a free port.
  uint32_t executor_port = 0;
  /// Shared secret; empty: $KVCONNECT_TOKEN, else generated for a one-node launch.
  std::string token;
  /// Names the shm segments (/kvc-<uid>-<instance>-node<n>); empty: chosen by the launcher.
  std::string instance;
  std::string log_level = "info";  ///< trace | debug | info | warn | error | off; every process
  uint32_t heartbeat_ms = defaults::heartbeat_ms;
  uint32_t connection_timeout_ms = defaults::connection_timeout_ms;
  uint32_t register_timeout_ms = defaults::register_timeout_ms;
  uint32_t ready_timeout_ms = defaults::ready_timeout_ms;
  /// How long the engine of a launch waits for one step's output; above job_timeout_ms, so that
  /// a lost report fails its jobs at their deadline instead of ending the run (check_config).
  uint32_t step_timeout_ms = defaults::step_timeout_ms;
  uint32_t stop_timeout_ms = defaults::stop_timeout_ms;
  /// a job's deadline after its step; 0: none by time
  uint32_t job_timeout_ms = defaults::job_timeout_ms;
  /// a job's deadline in later steps; 0: none by steps
  uint32_t job_timeout_steps = defaults::job_timeout_steps;
  /// The launcher's progress line off a terminal: one every this many ms; 0: none.
  uint32_t progress_interval_ms = 5000;
  /// Injected faults, one spec each (docs/faults.md); checked by the loader.
  std::vector<std::string> faults;
  uint64_t fault_seed = 0;  ///< the injected faults' seed
  friend bool operator==(const runtime_section&, const runtime_section&) = default;
};

struct token_range {
  uint32_t min = 0;
  uint32_t max = 0;
  friend bool operator==(const token_range&, const token_range&) = default;
};

struct multi_turn_config {
  double probability = 0.3;  ///< chance that a finished request comes back with a next turn
  uint32_t max_turns = 4;
  friend bool operator==(const multi_turn_config&, const multi_turn_config&) = default;
};

/// The simulated engine's workload and its model's costs (launch/engines/sim/, docs/config.md).
/// The smoke run of `kvconnect launch` reads only `steps`.
struct workload_section {
  uint32_t requests = 1000;
  double arrival_rate = 0.5;  ///< requests per step (Poisson); 0: all arrive at step 1
  token_range prompt_tokens{64, 768};
  /// Prompts start with a prefix of one of `documents` shared documents, chosen with Zipf
  /// popularity of exponent `zipf`.
  uint32_t documents = 64;
  double zipf = 1.1;
  token_range shared_prefix_tokens{32, 512};
  multi_turn_config multi_turn;
  token_range output_tokens{8, 64};
  uint32_t max_running = 32;
  /// Tokens one step may compute (vLLM's max_num_batched_tokens); prefills are chunked to it.
  uint32_t max_batched_tokens = 2048;
  /// The simulated model's time: per prefill token computed, per step that decodes, per
  /// token loaded from the CPU pool.
  double prefill_token_us = 50.0;
  double decode_step_us = 5000.0;
  double load_token_us = 2.0;
  uint64_t seed = 0;
  uint32_t steps = 200;  ///< steps with arrivals
  /// Then at most this many steps without arrivals while what arrived finishes; what is left
  /// after them is aborted (launch/engines/sim/engine_loop.hpp). 0: abort at once.
  uint32_t drain_steps = 1000;
  friend bool operator==(const workload_section&, const workload_section&) = default;
};

/// Where the scheduler's CPU tier publishes its KV events (vLLM's wire format).
struct kv_events_config {
  std::string endpoint;         ///< ZeroMQ PUB bind address, e.g. tcp://*:5557; empty: off
  std::string replay_endpoint;  ///< ROUTER bind address for missed batches; empty: no replay
  std::string topic;            ///< first frame of every batch
  friend bool operator==(const kv_events_config&, const kv_events_config&) = default;
};

/// What the scheduler process exposes about itself (docs/observability.md).
struct observe_section {
  uint32_t metrics_port = 0;  ///< GET /metrics on runtime.host at this port; 0: off
  kv_events_config kv_events;
  std::string trace = "off";  ///< off | messages | jobs
  std::string trace_dir;      ///< where every process writes its trace file; needed unless off
  bool record = false;        ///< the scheduler records the run's inputs (kvconnect replay-run)
  std::string record_dir;     ///< where the record goes; empty: trace_dir
  friend bool operator==(const observe_section&, const observe_section&) = default;
};

struct launch_config {
  topology_section topology;
  kv_cache_section kv_cache;
  offload_section offload;
  runtime_section runtime;
  workload_section workload;
  observe_section observe;
  friend bool operator==(const launch_config&, const launch_config&) = default;
};

/// The config as YAML, every key in file order (what `kvconnect config show` prints); loading
/// it back gives the same config.
std::string to_yaml(const launch_config& config);

/// The engine's wait for a step's output (`step_ms`, runtime.step_timeout_ms) against the
/// coordinator's deadline (`job_ms`, runtime.job_timeout_ms), which releases a step whose report
/// was lost: a wait that ends first ends the run where the deadline would have failed the jobs.
/// The problem in one sentence naming both keys (`step_key`, `job_key`); empty when the wait
/// outlasts the deadline. `deadline_needed`: the engine waits for every step (a launch), so a
/// job_ms of 0 (no deadline by time) is a problem too; without it (the in-process soak takes
/// what has arrived) 0 is fine.
std::string step_wait_problem(uint32_t step_ms, uint32_t job_ms, const std::string& step_key,
                              const std::string& job_key, bool deadline_needed);

/// The executor channel's port: runtime.executor_port, else runtime.port + 1 when runtime.port
/// is fixed, else 0 (a free one). check_config refuses a port + 1 beyond 65535.
uint16_t executor_port_of(const runtime_section& runtime);

}  // namespace kvc::launch
