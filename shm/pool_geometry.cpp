#include "shm/pool_geometry.hpp"

#include <limits>
#include <string>

namespace kvc::shm {

status validate(const pool_geometry& g) {
  if (g.world_size == 0 || g.num_slots == 0 || g.slot_bytes == 0) {
    return make_error(errc::invalid_argument,
                      "pool geometry needs world_size, num_slots and slot_bytes > 0 (got " +
                          std::to_string(g.world_size) + ", " + std::to_string(g.num_slots) +
                          ", " + std::to_string(g.slot_bytes) + ")");
  }
  constexpr uint64_t max = std::numeric_limits<uint64_t>::max();
  uint64_t rank = 0;
  uint64_t pool = 0;
  if (g.slot_bytes > max - slot_alignment ||
      __builtin_mul_overflow(uint64_t{g.num_slots}, g.slot_stride(), &rank) ||
      __builtin_mul_overflow(uint64_t{g.world_size}, rank, &pool) || pool > max - pool_offset) {
    return make_error(errc::invalid_argument, "pool geometry overflows 64-bit sizes");
  }
  return status::success();
}

result<pool_geometry> size_pool(uint64_t cpu_bytes_to_use, uint32_t world_size,
                                uint64_t per_rank_bytes_per_block) {
  if (world_size == 0) return make_error(errc::invalid_argument, "world_size must be > 0");
  if (per_rank_bytes_per_block == 0) {
    return make_error(errc::invalid_argument, "per-rank bytes per block must be > 0");
  }
  uint64_t block_all_ranks = 0;
  if (__builtin_mul_overflow(uint64_t{world_size}, per_rank_bytes_per_block, &block_all_ranks)) {
    return make_error(errc::invalid_argument, "world_size x bytes per block overflows");
  }
  const uint64_t slots = cpu_bytes_to_use / block_all_ranks;
  if (slots == 0) {
    return make_error(errc::invalid_argument,
                      "cpu_bytes_to_use " + std::to_string(cpu_bytes_to_use) +
                          " holds no block: one block over " + std::to_string(world_size) +
                          " ranks needs " + std::to_string(block_all_ranks) + " bytes");
  }
  if (slots > std::numeric_limits<uint32_t>::max()) {
    return make_error(errc::invalid_argument,
                      std::to_string(slots) + " CPU slots do not fit a 32-bit cpu_slot");
  }
  pool_geometry g{world_size, static_cast<uint32_t>(slots), per_rank_bytes_per_block};
  if (auto st = validate(g); !st) return st;
  return g;
}

}  // namespace kvc::shm
