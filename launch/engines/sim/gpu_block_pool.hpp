#pragma once
/// gpu_block_pool: the simulated engine's GPU KV-block allocator with prefix caching, a small
/// model of vLLM's BlockPool + KVCacheManager for one KV-cache group.
///
/// Block 0 is the null block and never handed out. Every other block has a ref count (requests
/// using it) and, once full and computed, may carry a block hash that makes it findable by
/// cached_prefix(). Blocks with ref count 0 sit in one free queue in LRU order: allocate() takes
/// from the head (evicting the block's hash from the cache), free() appends at the tail, in
/// reverse block order so that a request's tail blocks are evicted first (as vLLM does). A cached
/// free block can be revived by take() (it leaves the free queue). Only the first block computed
/// for a hash is registered; a second block with the same content stays anonymous.
///
/// Used by the simulated engine's scheduler (sim_scheduler); not thread-safe.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "proto/block_key.hpp"
#include "proto/ids.hpp"

namespace kvc::sim {

class gpu_block_pool {
 public:
  /// num_blocks includes the null block 0; must be >= 2.
  explicit gpu_block_pool(uint32_t num_blocks);

  uint32_t num_blocks() const noexcept { return static_cast<uint32_t>(blocks_.size()); }
  /// Blocks with ref count 0 (cached or not): what allocate() can hand out.
  uint32_t num_free() const noexcept { return static_cast<uint32_t>(free_.size()); }
  uint32_t ref_count(gpu_block b) const { return blocks_.at(b).ref; }
  /// Whether block b is registered in the prefix cache.
  bool is_cached(gpu_block b) const { return blocks_.at(b).hash.has_value(); }

  /// The longest prefix of `hashes` (at most max_blocks) whose blocks are cached. Read-only.
  std::vector<gpu_block> cached_prefix(std::span<const block_key> hashes, size_t max_blocks) const;
  /// ref += 1 for each block; a block at ref 0 leaves the free queue.
  void take(std::span<const gpu_block> blocks);
  /// n blocks from the head of the free queue (ref 1, hash dropped), or nullopt (nothing
  /// changed) when fewer than n are free.
  std::optional<std::vector<gpu_block>> allocate(uint32_t n);
  /// Registers a full, computed block under `hash` unless the hash is known already.
  void cache(gpu_block b, const block_key& hash);
  /// ref -= 1 for each block, last block first; blocks reaching 0 join the free queue's tail.
  /// The null block is ignored.
  void free(std::span<const gpu_block> blocks);
  /// Forgets every hash (vLLM's reset_prefix_cache).
  void reset_prefix_cache();

 private:
  struct block {
    uint32_t ref = 0;
    std::optional<block_key> hash;
    std::list<gpu_block>::iterator pos;  ///< in free_, valid iff ref == 0
  };

  std::vector<block> blocks_;
  std::list<gpu_block> free_;  ///< LRU order: head is evicted first
  std::unordered_map<block_key, gpu_block, block_key_hash> cached_;
};

}  // namespace kvc::sim
