#pragma once
/// list_scout: a cursor that walks an index_list from its least-recent end ahead of the code
/// that consumes that end (an eviction walk, a ghost-list trim), one node per step, prefetching
/// each node it reaches and whatever else the caller names for it (e.g. its key's index slot).
///
/// Walking a list is a chain of dependent loads: each node's `next` is known only once the
/// node is in cache, so an eviction walk over cold nodes costs one full cache miss per node.
/// The scout pays those misses earlier, one per step, at places where other work overlaps
/// them (between a batch lookup's passes, between inserts), so the walk finds its nodes cached.
///
/// It is only a hint: results never depend on it. Its position is checked before each step
/// (`valid` says whether the node is still in this list) and the owner reports what happens
/// to it: moved() when a node goes to the recent end (the scout would then run on from there),
/// consumed() after a walk from the front.
#include <cstdint>

#include "actors/scheduler/index_list.hpp"

namespace kvc::scheduler {

template <class Node>
class list_scout {
 public:
  static constexpr uint32_t npos = UINT32_MAX;
  /// How far ahead of the front the scout runs at most (nodes).
  static constexpr uint32_t max_lead = 96;

  /// One step: prefetch the next node of the walk and call fetch(id) for the node reached
  /// (which an earlier step prefetched). `valid(id)` must say whether node id is still in
  /// `list`; a scout on a node that left it restarts at the front.
  template <class Valid, class Fetch>
  void step(const Node* nodes, const index_list<Node>& list, Valid&& valid, Fetch&& fetch) {
    uint32_t s = at_;
    if (s == npos || s == list.end() || !valid(s)) {
      s = list.front();
      lead_ = 0;
      if (s == list.end()) {
        at_ = npos;
        return;
      }
    }
    if (lead_ >= max_lead) {
      at_ = s;
      return;
    }
    const uint32_t next = nodes[s].next;
    __builtin_prefetch(&nodes[next]);
    fetch(s);
    at_ = next;
    ++lead_;
  }

  /// The node the next step starts from (npos: the front).
  uint32_t at() const noexcept { return at_; }

  /// Forgets the walk (its list was emptied).
  void reset() noexcept {
    at_ = npos;
    lead_ = 0;
  }

  /// Node `id` moved to the recent end of the list (or to another list).
  void moved(uint32_t id) noexcept {
    if (id == at_) at_ = npos;
  }

  /// A walk from the front went over `walked` nodes; `met` says whether it reached the scout's
  /// node (then everything the scout had fetched is used up and it restarts at the front).
  void consumed(uint32_t walked, bool met) noexcept {
    lead_ = !met && walked < lead_ ? lead_ - walked : 0;
    if (lead_ == 0) at_ = npos;
  }

 private:
  uint32_t at_ = npos;
  uint32_t lead_ = 0;  ///< nodes the scout walked past the front (an estimate)
};

}  // namespace kvc::scheduler
