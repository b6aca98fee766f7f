#include "shm/segment_header.hpp"

namespace kvc::shm {
namespace {

struct fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;
  void add(uint64_t v, int bytes) noexcept {
    for (int i = 0; i < bytes; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
};

}  // namespace

uint64_t layout_checksum(uint32_t version, uint32_t world_size, uint32_t num_slots,
                         uint64_t slot_bytes, uint64_t slot_stride, uint64_t pool_off,
                         uint64_t total_bytes) noexcept {
  fnv1a f;
  f.add(version, 4);
  f.add(world_size, 4);
  f.add(num_slots, 4);
  f.add(slot_bytes, 8);
  f.add(slot_stride, 8);
  f.add(pool_off, 8);
  f.add(total_bytes, 8);
  return f.h;
}

uint64_t layout_checksum(const pool_geometry& g) noexcept {
  return layout_checksum(segment_layout_version, g.world_size, g.num_slots, g.slot_bytes,
                         g.slot_stride(), pool_offset, g.segment_bytes());
}

}  // namespace kvc::shm
