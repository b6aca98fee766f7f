#include "actors/scheduler/manager_config.hpp"

#include <string>

namespace kvc::scheduler {

result<eviction_policy> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return eviction_policy::lru;
  if (name == "arc") return eviction_policy::arc;
  return make_error(errc::unknown_policy,
                    "unknown eviction policy \"" + std::string{name} + "\" (expected lru or arc)");
}

std::string_view to_string(eviction_policy p) noexcept {
  return p == eviction_policy::arc ? "arc" : "lru";
}

status validate(const manager_config& cfg) {
  if (cfg.capacity < 1)
    return make_error(errc::invalid_argument, "capacity must be >= 1");
  if (cfg.capacity > max_manager_capacity)
    return make_error(errc::invalid_argument,
                      "capacity must be <= " + std::to_string(max_manager_capacity));
  if (cfg.policy != eviction_policy::lru && cfg.policy != eviction_policy::arc)
    return make_error(errc::unknown_policy, "unknown eviction policy value");
  if (cfg.store_threshold == 1)
    return make_error(errc::invalid_argument,
                      "store_threshold must be 0 (reuse filter off) or >= 2, got 1");
  if (cfg.store_threshold >= 2) {
    if (cfg.max_tracker_size < 1)
      return make_error(errc::invalid_argument,
                        "max_tracker_size must be >= 1 when the reuse filter is on");
    if (cfg.max_tracker_size > max_tracker_entries)
      return make_error(errc::invalid_argument,
                        "max_tracker_size must be <= " + std::to_string(max_tracker_entries));
  }
  return status::success();
}

}  // namespace kvc::scheduler
