#include "launch/engines/sim/gpu_block_pool.hpp"

#include <cassert>

namespace kvc::sim {

gpu_block_pool::gpu_block_pool(uint32_t num_blocks) : blocks_(num_blocks) {
  assert(num_blocks >= 2);
  blocks_[0].ref = 1;  // the null block is never free
  for (gpu_block b = 1; b < num_blocks; ++b) blocks_[b].pos = free_.insert(free_.end(), b);
}

std::vector<gpu_block> gpu_block_pool::cached_prefix(std::span<const block_key> hashes,
                                                     size_t max_blocks) const {
  std::vector<gpu_block> out;
  for (size_t i = 0; i < hashes.size() && i < max_blocks; ++i) {
    auto it = cached_.find(hashes[i]);
    if (it == cached_.end()) break;
    out.push_back(it->second);
  }
  return out;
}

void gpu_block_pool::take(std::span<const gpu_block> blocks) {
  for (gpu_block b : blocks) {
    auto& blk = blocks_.at(b);
    if (blk.ref++ == 0) free_.erase(blk.pos);
  }
}

std::optional<std::vector<gpu_block>> gpu_block_pool::allocate(uint32_t n) {
  if (n > free_.size()) return std::nullopt;
  std::vector<gpu_block> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const gpu_block b = free_.front();
    free_.pop_front();
    auto& blk = blocks_[b];
    blk.ref = 1;
    if (blk.hash) {
      cached_.erase(*blk.hash);
      blk.hash.reset();
    }
    out.push_back(b);
  }
  return out;
}

void gpu_block_pool::cache(gpu_block b, const block_key& hash) {
  auto& blk = blocks_.at(b);
  if (b == 0 || blk.hash || cached_.contains(hash)) return;
  blk.hash = hash;
  cached_.emplace(hash, b);
}

void gpu_block_pool::free(std::span<const gpu_block> blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    if (*it == 0) continue;
    auto& blk = blocks_.at(*it);
    assert(blk.ref > 0);
    if (--blk.ref == 0) blk.pos = free_.insert(free_.end(), *it);
  }
}

void gpu_block_pool::reset_prefix_cache() {
  cached_.clear();
  for (auto& blk : blocks_) blk.hash.reset();
}

}  // namespace kvc::sim
