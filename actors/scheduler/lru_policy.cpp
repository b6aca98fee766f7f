#include "actors/scheduler/lru_policy.hpp"

#include <algorithm>

namespace kvc::scheduler {

lru_policy::lru_policy(uint32_t capacity)
    : cap_(capacity),
      nodes_(new block_node[size_t{capacity} + 1]),
      order_(nodes_.get(), capacity),
      index_(nodes_.get(), capacity) {}

void lru_policy::clear_epochs(uint32_t used) noexcept {
  for (uint32_t i = 0; i < used; ++i) nodes_[i].mark &= block_node::flag_bit;
}

std::vector<block_key> lru_policy::keys() const {
  std::vector<block_key> out;
  out.reserve(order_.size());
  for (uint32_t i = order_.front(); i != order_.end(); i = order_.next(i))
    out.push_back(nodes_[i].key());
  return out;
}

size_t lru_policy::memory_bytes() const noexcept {
  return (size_t{cap_} + 1) * sizeof(block_node) + index_.memory_bytes();
}

}  // namespace kvc::scheduler
