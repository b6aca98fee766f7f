#include "actors/scheduler/arc_policy.hpp"

#include <algorithm>

namespace kvc::scheduler {

arc_policy::arc_policy(uint32_t capacity)
    : cap_(capacity),
      nodes_(new block_node[size_t{capacity} * 3 + 4]),
      t1_(nodes_.get(), capacity * 3),
      t2_(nodes_.get(), capacity * 3 + 1),
      b1_(nodes_.get(), capacity * 3 + 2),
      b2_(nodes_.get(), capacity * 3 + 3),
      index_(nodes_.get(), size_t{capacity} * 3) {}

bool arc_policy::evict(uint32_t n, uint32_t epoch, std::vector<uint32_t>& slots,
                       std::vector<block_key>& keys) {
  slots.clear();
  keys.clear();
  int64_t v = t1_.size();
  const auto target = static_cast<int64_t>(p_);  // Python int(): truncation, p >= 0
  uint32_t c1 = t1_.front();
  uint32_t c2 = t2_.front();
  for (uint32_t round = 0; round < n; ++round) {
    uint32_t chosen = npos;
    if (v >= target) {
      while (c1 != t1_.end() && !nodes_[c1].evictable(epoch)) c1 = t1_.next(c1);
      if (c1 != t1_.end()) {
        index_.prefetch(nodes_[c1].key());
        chosen = c1;
        c1 = t1_.next(c1);
        --v;
      }
    }
    if (chosen == npos) {
      while (c2 != t2_.end() && !nodes_[c2].evictable(epoch)) c2 = t2_.next(c2);
      if (c2 == t2_.end()) return false;
      index_.prefetch(nodes_[c2].key());
      chosen = c2;
      c2 = t2_.next(c2);
    }
    slots.push_back(chosen);
  }
  for (uint32_t s : slots) {
    const block_key k = nodes_[s].key();
    keys.push_back(k);
    const bool from_t2 = nodes_[s].flag();
    (from_t2 ? t2_ : t1_).erase(s);
    push_ghost(k, from_t2 ? 1 : 0);
  }
  return true;
}

void arc_policy::push_ghost(const block_key& k, uint32_t pool) {
  index_list<block_node>& list = pool == 0 ? b1_ : b2_;
  uint32_t g;
  if (list.size() == cap_) {
    g = list.front();  // trim: the oldest ghost goes, its node is reused
    list.erase(g);
    index_.erase(nodes_[g].key());
  } else if (ghost_free_[pool] != npos) {
    g = ghost_free_[pool];
    ghost_free_[pool] = nodes_[g].next;
  } else {
    g = cap_ * (pool + 1) + ghost_used_[pool]++;
  }
  nodes_[g].set_key(k);
  index_.replace(k, g);  // the key's entry pointed at its old slot
  list.push_back(g);
}

void arc_policy::clear() noexcept {
  t1_.clear();
  t2_.clear();
  b1_.clear();
  b2_.clear();
  index_.clear();
  p_ = 0.0;
  ghost_used_[0] = ghost_used_[1] = 0;
  ghost_free_[0] = ghost_free_[1] = npos;
}

void arc_policy::clear_epochs(uint32_t used) noexcept {
  for (uint32_t i = 0; i < used; ++i) nodes_[i].mark &= block_node::flag_bit;
}

std::vector<block_key> arc_policy::keys_of(const index_list<block_node>& l) const {
  std::vector<block_key> out;
  out.reserve(l.size());
  for (uint32_t i = l.front(); i != l.end(); i = l.next(i)) out.push_back(nodes_[i].key());
  return out;
}

size_t arc_policy::memory_bytes() const noexcept {
  return (size_t{cap_} * 3 + 4) * sizeof(block_node) + index_.memory_bytes();
}

}  // namespace kvc::scheduler
