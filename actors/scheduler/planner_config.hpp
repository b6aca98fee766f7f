#pragma once
/// planner_config: the planner's configuration, the scheduler side of the connector (vLLM
/// OffloadingSpec geometry plus the manager's kv_connector_extra_config). Plain data; validate()
/// checks it.
///
/// Geometry (reference §5): `factor = offloaded_block_size / gpu_block_size` GPU blocks per
/// offloaded block; `hash_factor = offloaded_block_size / hash_block_size` request block hashes
/// per offloaded block (hash_block_size is vLLM's cache_config.block_size, the granularity of
/// Request.block_hashes).
#include <cstdint>
#include <optional>

#include "actors/scheduler/file_tier_ledger.hpp"
#include "actors/scheduler/manager_config.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

struct planner_config {
  uint32_t gpu_block_size = 16;       ///< tokens per GPU block, >= 1
  uint32_t offloaded_block_size = 0;  ///< tokens per CPU block; 0 = gpu_block_size
  uint32_t hash_block_size = 0;       ///< tokens per request block hash; 0 = gpu_block_size
  bool enable_prefix_caching = true;  ///< the GPU prefix cache is on (enables the delay rule)
  manager_config manager;             ///< the CPU pool's ledger
  /// The file tier behind the pool (offload.secondary_tiers); none: the pool is the only tier.
  std::optional<file_tier_limits> file_tier;
};

/// The derived geometry of a valid config.
struct connector_geometry {
  uint32_t gpu_block_size = 0;
  uint32_t offloaded_block_size = 0;  ///< "obs"
  uint32_t factor = 0;                ///< GPU blocks per offloaded block
  uint32_t hash_factor = 0;           ///< request block hashes per offloaded block
};

/// Checks gpu_block_size >= 1, offloaded_block_size a multiple of gpu_block_size and of
/// hash_block_size; errc::invalid_argument naming the offending values otherwise. (The manager
/// config is checked when the manager is built.)
result<connector_geometry> make_geometry(const planner_config& cfg);

}  // namespace kvc::scheduler
