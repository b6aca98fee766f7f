#include "launch/engines/sim/kv_content.hpp"

#include <algorithm>
#include <cstring>

namespace kvc::sim {

uint64_t chain(uint64_t previous, uint32_t token) noexcept {
  return block_key::mix(previous * 0x100000001b3ull ^ (uint64_t{token} + 0x9e3779b97f4a7c15ull));
}

block_key block_hash_of(uint64_t h) noexcept {
  return {h, block_key::mix(h ^ 0x5bd1e995u)};
}

void token_kv(uint64_t h, uint32_t layer, rank_id rank, std::span<std::byte> out) noexcept {
  const uint64_t seed = block_key::mix(h ^ block_key::mix(uint64_t{layer} + 1) ^
                                       block_key::mix((uint64_t{rank} << 32) | 0xabcu));
  for (size_t i = 0; i < out.size(); i += 8) {
    const uint64_t v = block_key::mix(seed + i);
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, out.size() - i));
  }
}

}  // namespace kvc::sim
