#include "actors/scheduler/reuse_tracker.hpp"

#include <algorithm>

namespace kvc::scheduler {

reuse_tracker::reuse_tracker(uint32_t max_size)
    : max_(max_size),
      nodes_(new node[size_t{max_size} + 1]),
      order_(nodes_.get(), max_size),
      index_(nodes_.get(), max_size) {}

std::vector<std::pair<block_key, uint32_t>> reuse_tracker::entries() const {
  std::vector<std::pair<block_key, uint32_t>> out;
  out.reserve(order_.size());
  for (uint32_t i = order_.front(); i != order_.end(); i = order_.next(i))
    out.emplace_back(block_key{nodes_[i].key_hi, nodes_[i].key_lo}, nodes_[i].count);
  return out;
}

size_t reuse_tracker::memory_bytes() const noexcept {
  return (size_t{max_} + 1) * sizeof(node) + index_.memory_bytes();
}

}  // namespace kvc::scheduler
