#pragma once
/// launch_plan: what the processes of a launch need, derived from a launch_config: the KV
/// geometry (bytes of one GPU block and of one offloaded block on one rank), the node's pool
/// (slots per rank = cpu_bytes_to_use / world size / slot bytes, vLLM's sizing), the rank →
/// node map, the scheduler's embed::scheduler_connector_config and every rank's
/// embed::worker_connector_config. check_config() holds the checks that span several keys
/// (geometry, placement); the loader runs it and names the file and line.
///
/// Geometry, per rank: kv heads per rank = kv_heads / tensor_parallel (one replicated head
/// when there are fewer heads than ranks); layers per rank = ceil(layers / pipeline_parallel)
/// (the largest stage: every rank's slot has one size); one GPU block of one layer holds K and
/// V: page bytes = 2 * gpu_block_size * heads per rank * head_dim * dtype_bytes; one offloaded
/// block is factor = block_size / gpu_block_size GPU blocks of every layer.
///
/// Pure: no I/O, no clock, no environment (the token and the instance are passed in).
#include <cstdint>
#include <string>
#include <vector>

#include "actors/embed/embed_config.hpp"
#include "launch/config/launch_config.hpp"
#include "launch/config/synthetic_kv_spec.hpp"
#include "proto/status.hpp"
#include "shm/pool_geometry.hpp"

namespace kvc::launch {

struct kv_geometry {
  uint32_t world_size = 0;  ///< tensor_parallel * pipeline_parallel
  uint32_t kv_heads_per_rank = 0;
  uint32_t layers_per_rank = 0;
  uint32_t factor = 0;      ///< GPU blocks per offloaded block
  uint64_t page_bytes = 0;  ///< one GPU block of one layer on one rank
  uint64_t slot_bytes = 0;  ///< one offloaded block on one rank
};

/// A problem that spans keys; `key_path` names the key to change.
struct config_problem {
  std::string key_path;
  std::string message;
};

/// The geometry of a config whose keys are each in range (no division by zero).
kv_geometry derive_geometry(const launch_config& config);

/// Node index of every rank: the explicit placement, or the nodes filled in order
/// (ceil(world / nodes) ranks each) when `placement` is empty. Names that are no node map to
/// the number of nodes.
std::vector<uint32_t> rank_nodes(const topology_section& topology);

/// Who runs the config: `kvconnect launch` (its smoke run and simulated engine included), or an
/// engine that embeds kvconnect (kvconnect.vllm), whose own scheduler runs the requests: then
/// the smoke run's minimum GPU blocks and slots and the simulated engine's "longest request
/// fits the GPU blocks" do not apply.
enum class config_use : uint8_t { launch = 0, engine = 1 };

/// The checks across keys: placement vs TP×PP and the nodes, a node without ranks, duplicate
/// node names, heads vs TP, layers vs PP, offload block_size vs gpu_block_size, a pool too
/// small for one block per rank or too large for a node's shm_bytes, the smoke run's minimum
/// GPU blocks and slots (launch only), the workload's ranges (the longest request: launch only),
/// a step wait that does not outlast the job deadline (step_wait_problem). Every problem found,
/// in key order.
std::vector<config_problem> check_config(const launch_config& config,
                                         config_use use = config_use::launch);

struct launch_plan {
  kv_geometry kv;
  /// What the role processes are given (--kv-layers, --kv-page-bytes, --gpu-blocks,
  /// --block-factor); its slot_bytes() equals kv.slot_bytes.
  synthetic_kv_spec synthetic;
  /// The pool of every node's segment (the role processes size it for the whole world).
  shm::pool_geometry pool;
  std::vector<uint32_t> rank_node;  ///< node index of every rank
  embed::scheduler_connector_config scheduler;
  std::vector<embed::worker_connector_config> workers;  ///< by global rank

  /// The global ranks placed on `node`, ascending.
  std::vector<rank_id> ranks_on(uint32_t node) const;
};

/// What the run needs of offload.secondary_tiers beyond the loader's checks: one tier at most
/// (the fs tier), and a capacity_bytes that holds one block file (one rank's offloaded block of
/// this geometry and its 4 KiB header). errc::invalid_argument naming the key otherwise;
/// make_plan refuses the same (`kvconnect launch`: exit 2); `kvconnect soak` checks it first
/// (exit 2).
status check_tier_config(const launch_config& c);

/// Derives the plan of a checked config (offload enabled). errc::invalid_argument when the
/// config fails check_config (the first problem), offload is off, or a derived facade config
/// fails embed::validate.
result<launch_plan> make_plan(const launch_config& config, const std::string& instance,
                              const std::string& token, config_use use = config_use::launch);

/// make_plan of `config` as if offload.enabled were true: with offloading off, what a run
/// shares with the same run with it (the KV geometry, the ranks and their devices, the
/// network); its pool is sized but nobody creates it. With offloading on, make_plan's plan.
result<launch_plan> make_geometry_plan(const launch_config& config, const std::string& instance,
                                       const std::string& token,
                                       config_use use = config_use::launch);

}  // namespace kvc::launch
