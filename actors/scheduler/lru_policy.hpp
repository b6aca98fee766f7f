#pragma once
/// lru_policy: vLLM R1's LRUCachePolicy (one OrderedDict key -> BlockStatus) over a fixed node
/// array. Node i holds the block stored in CPU slot i; the recency list runs front = least
/// recent to back = most recent; a key_index maps keys to slots.
///
/// R1 semantics, kept exactly:
///  - insert appends at the most-recent end; find (Python `get`) never reorders;
///  - touch walks the keys in reverse and moves every tracked key, in any state, to the back,
///    so keys[0] ends most recent and later blocks of a request are evicted first;
///  - evict(n) scans from the least-recent end for idle (ref 0), unprotected blocks and takes
///    the first n in that order; fewer than n means failure with nothing changed.
/// The scan skips pinned and protected blocks as R1 does, so its cost grows with the number of
/// such blocks sitting at the cold end (in practice: none; they were just touched).
///
/// Thread-safety: none; the owning offload manager serialises all calls.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "actors/scheduler/block_node.hpp"
#include "actors/scheduler/index_list.hpp"
#include "actors/scheduler/key_index.hpp"
#include "actors/scheduler/list_scout.hpp"
#include "proto/block_key.hpp"

namespace kvc::scheduler {

class lru_policy {
 public:
  explicit lru_policy(uint32_t capacity);
  lru_policy(const lru_policy&) = delete;
  lru_policy& operator=(const lru_policy&) = delete;

  /// Number of tracked blocks.
  uint32_t size() const noexcept { return order_.size(); }
  uint32_t capacity() const noexcept { return cap_; }

  block_node& node(uint32_t slot) noexcept { return nodes_[slot]; }
  const block_node& node(uint32_t slot) const noexcept { return nodes_[slot]; }
  /// Slot of a tracked key, or npos. No recency side effect.
  uint32_t find(const block_key& k) const { return index_.find(k); }
  /// Same as find (the LRU index holds only tracked blocks); see arc_policy::find_id.
  uint32_t find_id(const block_key& k) const { return index_.find(k); }
  /// Always inlined, see key_index::prefetch.
  [[gnu::always_inline]] void prefetch(const block_key& k) const { index_.prefetch(k); }

  /// Tracks `k` in `slot` as a pending store (ref -1) at the most-recent end. A key that is
  /// already tracked (repeated within one prepare_store) keeps its place and moves to `slot`, as
  /// `OrderedDict[key] = block` does; its previous slot is leaked, exactly as in R1.
  /// Returns false in that repeated-key case.
  bool insert(const block_key& k, uint32_t slot) {
    nodes_[slot].start_pending(k);
    const uint32_t old = index_.insert_or_replace(k, slot);
    if (++inserts_ & 1) scout();
    if (old == npos) {
      order_.push_back(slot);
      return true;
    }
    order_.replace(old, slot);
    nodes_[old].ref = block_node::dead_ref;  // leaked
    return false;
  }

  /// Forgets the block in `slot` (a failed store).
  void remove(uint32_t slot) {
    order_.erase(slot);
    index_.erase(nodes_[slot].key());
  }

  /// Slots of many keys at once (npos for absent ones), with overlapped cache misses.
  /// The scout steps between find_all's passes, where its cache misses overlap the batch's.
  void find_all(std::span<const block_key> keys, uint32_t* slots) {
    index_.find_all(keys, slots, [this] { scout(); });
  }

  /// Version of the key -> slot mapping (see key_index::version).
  uint64_t index_version() const noexcept { return index_.version(); }

  /// R1 touch of keys already resolved by find_all (npos: untracked, skipped).
  /// Moving ids[n-1], ..., ids[0] to the back one by one is done run by run: a run is a
  /// stretch of tracked ids that already follow each other in the list in that order (usually
  /// the whole list: the previous touch of the same keys left them so), checked against the
  /// list as it is when the run starts, so moving it whole (splice) is the same as moving its
  /// nodes one by one. Repeated ids cannot extend a run (a run is a path in the list).
  void touch_ids(std::span<const uint32_t> ids) {
    scout();
    const uint32_t scout_at = scout_.at();
    size_t i = ids.size();
    while (i > 0) {
      const uint32_t first = ids[--i];
      if (first == npos) continue;
      uint32_t last = first;
      bool moves_scout = first == scout_at;
      for (; i > 0; --i) {
        const uint32_t id = ids[i - 1];
        if (id == npos) continue;
        if (nodes_[last].next != id) break;
        last = id;
        moves_scout |= id == scout_at;
      }
      order_.splice_to_back(first, last);
      if (moves_scout) scout_.moved(scout_at);
    }
  }

  /// touch_ids of the keys' slots as `hints` gives them, walked from the end while the hints
  /// are right (a hint is right when its node is live and holds the key: live nodes hold
  /// distinct keys). Checking a hint and extending a run read the same node, so both are done
  /// in one pass. Stops at the first key (from the end) whose hint is wrong or npos and
  /// returns r, its position plus one: keys [0, r) are left to the caller (find their slots,
  /// then touch_ids of them: the same as touching every key in one touch_ids, as moving a run
  /// in two parts is the same as moving it whole); hints [r, n) are the slots of the keys it
  /// touched. The nodes are fetched 8 keys ahead: a pool larger than the L2 cache would
  /// otherwise stall on each.
  size_t touch_hinted_suffix(std::span<const block_key> keys, const uint32_t* hints) {
    scout();
    // Locals, not members: the list writes below are uint32_t stores that may alias them.
    block_node* const nodes = nodes_.get();
    const uint32_t cap = cap_;
    const uint32_t scout_at = scout_.at();
    constexpr size_t ahead = 8;  // nodes prefetched ahead of the walk
    const size_t n = keys.size();
    for (size_t j = n; j > 0 && j + ahead > n; --j)
      __builtin_prefetch(&nodes[std::min(hints[j - 1], cap)]);
    // The key's slot if its hint is right, else npos.
    auto checked = [&](size_t j) {
      const uint32_t h = hints[j];
      if (h >= cap) return npos;
      const block_node& node = nodes[h];
      const uint64_t differ = (node.key_hi ^ keys[j].hi) | (node.key_lo ^ keys[j].lo);
      return differ == 0 && node.ref != block_node::dead_ref ? h : npos;
    };
    size_t i = n;
    bool moves_scout = false;
    uint32_t first = i > 0 ? checked(i - 1) : npos;
    while (first != npos) {  // a run first .. last, extended while the next key follows it
      --i;
      moves_scout |= first == scout_at;
      uint32_t last = first;
      uint32_t h = npos;
      for (; i > 0; --i) {
        if (i > ahead) __builtin_prefetch(&nodes[std::min(hints[i - 1 - ahead], cap)]);
        h = checked(i - 1);
        if (h == npos || nodes[last].next != h) break;
        moves_scout |= h == scout_at;
        last = h;
      }
      order_.splice_to_back(first, last);
      first = i > 0 ? h : npos;
    }
    if (moves_scout) scout_.moved(scout_at);
    return i;
  }

  /// Picks n victims (n >= 1) among idle blocks not protected under `epoch`, least recent
  /// first, and forgets them. Writes their slots to `slots` (sized to n) and their keys to the
  /// first n entries of `keys` (grown to at least n; entries past n are stale), in eviction
  /// order. false: fewer than n candidates, nothing changed.
  bool evict(uint32_t n, uint32_t epoch, std::vector<uint32_t>& slots,
             std::vector<block_key>& keys) {
    slots.resize(n);  // no allocation once warm; written through a pointer below
    uint32_t* const out = slots.data();
    uint32_t found = 0;
    uint32_t skipped = 0;
    bool met_scout = false;
    const uint32_t scout_at = scout_.at();
    uint32_t i = order_.front();
    for (; i != order_.end(); i = order_.next(i)) {
      met_scout |= i == scout_at;
      if (!nodes_[i].evictable(epoch)) {
        ++skipped;
        continue;
      }
      out[found] = i;
      if (++found == n) break;
    }
    if (found < n) {
      slots.clear();
      keys.clear();
      return false;
    }
    // The victims' index entries are cold: fetch them all, then erase (by tag and id).
    if (keys.size() < n) keys.resize(n);  // grows only: no per-call zero fill
    if (tags_.size() < n) tags_.resize(n);
    block_key* const k = keys.data();
    uint32_t* const tags = tags_.data();
    for (uint32_t v = 0; v < n; ++v) {
      k[v] = nodes_[out[v]].key();
      tags[v] = key_index<block_node>::tag_of(k[v]);
      index_.prefetch_tag(tags[v]);
    }
    for (uint32_t v = 0; v < n; ++v) index_.erase_id(tags[v], out[v]);
    if (skipped == 0) {
      order_.pop_front_through(i, n);  // the victims are the list's first n nodes
    } else {
      for (uint32_t v = 0; v < n; ++v) order_.erase(out[v]);
    }
    scout_.consumed(found + skipped, met_scout);
    return true;
  }

  /// One step of the scout: evict() walks the list's least-recent end, a chain of dependent
  /// loads; the scout (list_scout) walks it ahead, fetching each node. (Not the nodes' index
  /// slots: evict() fetches its victims' slots all at once before erasing, and fetching them
  /// here as well measured no faster.) It steps once per other insert, per find_all pass, per
  /// touch and per manager call (the manager calls this once per call that works on a batch):
  /// places where its cache misses overlap other work.
  void scout() noexcept {
    scout_.step(
        nodes_.get(), order_,
        [this](uint32_t id) { return nodes_[id].ref != block_node::dead_ref; }, [](uint32_t) {});
  }

  /// Resets the protection epochs of slots [0, used) (the manager's epoch counter wrapped).
  void clear_epochs(uint32_t used) noexcept;

  /// Forgets every tracked block (vLLM main's LRUCachePolicy.clear): empty list and index. The
  /// nodes keep stale contents; the owner marks its slots free.
  void clear() noexcept {
    order_.clear();
    index_.clear();
    scout_.reset();
  }

  /// Introspection: tracked keys from least to most recent.
  std::vector<block_key> keys() const;
  /// Heap bytes held: node array + key index.
  size_t memory_bytes() const noexcept;

 private:
  uint32_t cap_;
  std::unique_ptr<block_node[]> nodes_;  ///< [0, cap): slots; cap: list sentinel
  list_scout<block_node> scout_;
  uint32_t inserts_ = 0;
  std::vector<uint32_t> tags_;  ///< evict(): the victims' index tags
  index_list<block_node> order_;
  key_index<block_node> index_;
};

}  // namespace kvc::scheduler
