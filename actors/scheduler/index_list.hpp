#pragma once
/// index_list: an intrusive, circular doubly-linked list over the ids of a node array (any Node
/// with uint32_t prev/next members). The list owns no memory: its sentinel is a node of the
/// array, so every operation is a few index writes with no branch and no allocation. Order is
/// front = least recent, back = most recent, like Python's OrderedDict. Not thread-safe.
#include <cstdint>

namespace kvc::scheduler {

template <class Node>
class index_list {
 public:
  /// `sentinel` must be a node of `nodes` reserved for this list.
  index_list(Node* nodes, uint32_t sentinel) noexcept : nodes_(nodes), sentinel_(sentinel) {
    nodes_[sentinel_].prev = sentinel_;
    nodes_[sentinel_].next = sentinel_;
  }
  index_list(const index_list&) = delete;
  index_list& operator=(const index_list&) = delete;

  /// Empties the list; the nodes that were on it keep stale links (the owner forgets them).
  void clear() noexcept {
    nodes_[sentinel_].prev = sentinel_;
    nodes_[sentinel_].next = sentinel_;
    size_ = 0;
  }

  uint32_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  /// Iteration: for (i = front(); i != end(); i = next(i)).
  uint32_t front() const noexcept { return nodes_[sentinel_].next; }
  uint32_t back() const noexcept { return nodes_[sentinel_].prev; }
  uint32_t end() const noexcept { return sentinel_; }
  uint32_t next(uint32_t i) const noexcept { return nodes_[i].next; }

  void push_back(uint32_t i) noexcept {
    const uint32_t last = nodes_[sentinel_].prev;
    nodes_[i].prev = last;
    nodes_[i].next = sentinel_;
    nodes_[last].next = i;
    nodes_[sentinel_].prev = i;
    ++size_;
  }

  void erase(uint32_t i) noexcept {
    const uint32_t p = nodes_[i].prev;
    const uint32_t n = nodes_[i].next;
    nodes_[p].next = n;
    nodes_[n].prev = p;
    --size_;
  }

  /// Removes the front run up to and including `last`, which holds n nodes (erase of each).
  void pop_front_through(uint32_t last, uint32_t n) noexcept {
    const uint32_t after = nodes_[last].next;
    nodes_[sentinel_].next = after;
    nodes_[after].prev = sentinel_;
    size_ -= n;
  }

  void move_to_back(uint32_t i) noexcept {
    if (nodes_[sentinel_].prev == i) return;
    erase(i);
    push_back(i);
  }

  /// Moves the run first .. last (a contiguous stretch, in list order) to the back, keeping
  /// its order: the same as move_to_back of each of its nodes, front to back.
  void splice_to_back(uint32_t first, uint32_t last) noexcept {
    const uint32_t after = nodes_[last].next;
    if (after == sentinel_) return;  // already at the back
    const uint32_t before = nodes_[first].prev;
    nodes_[before].next = after;
    nodes_[after].prev = before;
    const uint32_t back = nodes_[sentinel_].prev;
    nodes_[back].next = first;
    nodes_[first].prev = back;
    nodes_[last].next = sentinel_;
    nodes_[sentinel_].prev = last;
  }

  /// Node `to` takes the place of node `from` (which leaves the list).
  void replace(uint32_t from, uint32_t to) noexcept {
    const uint32_t p = nodes_[from].prev;
    const uint32_t n = nodes_[from].next;
    nodes_[to].prev = p;
    nodes_[to].next = n;
    nodes_[p].next = to;
    nodes_[n].prev = to;
  }

 private:
  Node* nodes_;
  uint32_t sentinel_;
  uint32_t size_ = 0;
};

}  // namespace kvc::scheduler
