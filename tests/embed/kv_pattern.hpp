#pragma once
/// kv_pattern: the bytes an embed test's "forward" writes into GPU block b of rank r for
/// request tag t (`bytes` long, a multiple of 8): distinct per tag, rank and block, so a load
/// that brings back another block's, rank's or request's bytes is seen.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/block_key.hpp"
#include "proto/ids.hpp"

namespace kvc::embed::test {

inline std::vector<std::byte> kv_pattern(uint64_t t, rank_id r, gpu_block b, uint64_t bytes) {
  std::vector<std::byte> out(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = block_key::mix(t * 1000003 + r * 7919 + b * 31 + i);
    std::memcpy(out.data() + i, &v, 8);
  }
  return out;
}

}  // namespace kvc::embed::test
