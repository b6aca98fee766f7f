#pragma once
/// chain_walker: a performance hint for intrusive lists. evict() scans a list from its
/// least-recent end, and every step of that scan is a dependent cache miss (the next node is
/// only known once the current one is loaded). The walker follows the same chain a little at
/// a time during earlier calls (touch), prefetching each node, so the next scan finds them in
/// cache. It never changes anything: if the list changes under it, it just prefetches the
/// wrong nodes. Not thread-safe.
#include <cstdint>

namespace kvc::scheduler {

class chain_walker {
 public:
  /// Start again from `id` (the new least-recent node after an eviction).
  void restart(uint32_t id) noexcept {
    at_ = id;
    left_ = max_steps;
  }

  /// One step along `next`, prefetching the node reached; `visit(id)` is called for the node
  /// left behind (loaded by now: prefetch what its eviction will touch). Ids above `last_id`
  /// (a free slot's "none" link) end the walk.
  template <class Node, class Visit>
  void step(const Node* nodes, uint32_t last_id, Visit&& visit) noexcept {
    if (left_ == 0 || at_ > last_id) return;
    --left_;
    visit(at_);
    at_ = nodes[at_].next;
    if (at_ <= last_id) __builtin_prefetch(nodes + at_);
  }

 private:
  static constexpr uint32_t max_steps = 24;  ///< ~ one request's evictions ahead
  uint32_t at_ = UINT32_MAX;
  uint32_t left_ = 0;
};

}  // namespace kvc::scheduler
