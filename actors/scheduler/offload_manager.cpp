#include "actors/scheduler/offload_manager.hpp"

#include "actors/scheduler/cpu_offload_manager.hpp"

namespace kvc::scheduler {

result<std::unique_ptr<offload_manager>> offload_manager::create(const manager_config& cfg) {
  if (cfg.policy == eviction_policy::arc) {
    auto m = arc_offload_manager::create(cfg);
    if (!m) return m.error();
    return std::unique_ptr<offload_manager>{std::move(*m)};
  }
  if (cfg.policy != eviction_policy::lru)
    return make_error(errc::unknown_policy, "unknown eviction policy value");
  auto m = lru_offload_manager::create(cfg);
  if (!m) return m.error();
  return std::unique_ptr<offload_manager>{std::move(*m)};
}

}  // namespace kvc::scheduler
