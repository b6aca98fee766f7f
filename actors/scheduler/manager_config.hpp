#pragma once
/// Configuration of the offload manager (vLLM kv_connector_extra_config: eviction_policy,
/// store_threshold, max_tracker_size; capacity = number of CPU slots).
#include <cstdint>
#include <string_view>

#include "proto/status.hpp"

namespace kvc::scheduler {

enum class eviction_policy : uint8_t { lru = 0, arc = 1 };

/// Upper bounds: node arrays are reserved up front (committed lazily by the OS) and every
/// slot / node id, ARC ghosts included, must fit in 32 bits.
inline constexpr uint32_t max_manager_capacity = 1u << 26;
inline constexpr uint32_t max_tracker_entries = 1u << 26;

struct manager_config {
  uint32_t capacity = 0;                        ///< CPU slots; must be >= 1
  eviction_policy policy = eviction_policy::lru;
  uint32_t store_threshold = 0;                 ///< 0 = reuse filter off; >= 2 enables it
  uint32_t max_tracker_size = 64000;            ///< reuse-filter tracker capacity, >= 1
  bool enable_events = true;                    ///< record stored / removed kv_events
};

/// "lru" or "arc"; anything else is errc::unknown_policy with a clear message.
result<eviction_policy> parse_eviction_policy(std::string_view name);
std::string_view to_string(eviction_policy p) noexcept;

/// Checks capacity >= 1, store_threshold == 0 or >= 2 (1 is an error, as in vLLM),
/// max_tracker_size >= 1 when the filter is on. Also capacity <= max_manager_capacity and
/// max_tracker_size <= max_tracker_entries.
status validate(const manager_config& cfg);

}  // namespace kvc::scheduler
