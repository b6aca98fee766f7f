#pragma once
/// reuse_tracker: the counting half of vLLM R1's FilterReusedOffloadingManager. It remembers
/// how often each key was looked up, in an LRU-ordered table of at most max_size keys:
/// a known key moves to the most-recent end and counts +1; a new key first drops the
/// least-recent entry when the table is full, then starts at 1. Stores never reset counts.
/// The manager stores only keys whose count reached the threshold.
///
/// Fixed node array (ids [0, max_size), sentinel max_size; committed lazily by the OS), one
/// key_index; no allocation once the table is full. Not thread-safe.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "actors/scheduler/index_list.hpp"
#include "actors/scheduler/key_index.hpp"
#include "proto/block_key.hpp"

namespace kvc::scheduler {

class reuse_tracker {
 public:
  explicit reuse_tracker(uint32_t max_size);
  reuse_tracker(const reuse_tracker&) = delete;
  reuse_tracker& operator=(const reuse_tracker&) = delete;

  /// Counts one lookup of `k` (vLLM's FilterReusedOffloadingManager.lookup bookkeeping).
  void record(const block_key& k) {
    uint32_t i = index_.find(k);
    if (i != npos) {
      order_.move_to_back(i);
      if (nodes_[i].count != UINT32_MAX) ++nodes_[i].count;  // saturates; only >= t matters
      return;
    }
    if (order_.size() >= max_) {
      i = order_.front();
      order_.erase(i);
      index_.erase(block_key{nodes_[i].key_hi, nodes_[i].key_lo});
    } else {
      i = used_++;
    }
    nodes_[i].key_hi = k.hi;
    nodes_[i].key_lo = k.lo;
    nodes_[i].count = 1;
    (void)index_.insert_or_replace(k, i);
    order_.push_back(i);
  }

  /// record() of every key in order, with the index entries of the batch fetched up front.
  void record_all(std::span<const block_key> keys) {
    for (const block_key& k : keys) index_.prefetch(k);
    for (const block_key& k : keys) record(k);
  }

  /// Lookups counted for `k` while it stayed in the table; 0 if unknown.
  uint32_t count(const block_key& k) const {
    const uint32_t i = index_.find(k);
    return i == npos ? 0 : nodes_[i].count;
  }

  /// Always inlined, see key_index::prefetch.
  [[gnu::always_inline]] void prefetch(const block_key& k) const { index_.prefetch(k); }

  uint32_t size() const noexcept { return order_.size(); }
  uint32_t max_size() const noexcept { return max_; }
  /// Introspection: (key, count) from least to most recent.
  std::vector<std::pair<block_key, uint32_t>> entries() const;
  /// Heap bytes held: node array + key index.
  size_t memory_bytes() const noexcept;

 private:
  static constexpr uint32_t npos = UINT32_MAX;
  struct node {
    uint64_t key_hi;
    uint64_t key_lo;
    uint32_t prev;
    uint32_t next;
    uint32_t count;
    uint32_t unused;
  };
  static_assert(sizeof(node) == 32);

  uint32_t max_;
  uint32_t used_ = 0;
  std::unique_ptr<node[]> nodes_;
  index_list<node> order_;
  key_index<node> index_;
};

}  // namespace kvc::scheduler
