#include "actors/scheduler/planner_config.hpp"

#include <string>

namespace kvc::scheduler {

result<connector_geometry> make_geometry(const planner_config& cfg) {
  if (cfg.gpu_block_size == 0)
    return make_error(errc::invalid_argument, "connector: gpu_block_size must be >= 1");
  const uint32_t gpu = cfg.gpu_block_size;
  const uint32_t obs = cfg.offloaded_block_size == 0 ? gpu : cfg.offloaded_block_size;
  const uint32_t hbs = cfg.hash_block_size == 0 ? gpu : cfg.hash_block_size;
  if (obs % gpu != 0)
    return make_error(errc::invalid_argument,
                      "connector: offloaded block_size " + std::to_string(obs) +
                          " is not a multiple of the GPU block size " + std::to_string(gpu));
  if (obs % hbs != 0)
    return make_error(errc::invalid_argument,
                      "connector: offloaded block_size " + std::to_string(obs) +
                          " is not a multiple of the hash block size " + std::to_string(hbs));
  return connector_geometry{gpu, obs, obs / gpu, obs / hbs};
}

}  // namespace kvc::scheduler
