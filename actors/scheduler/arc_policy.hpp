#pragma once
/// arc_policy: vLLM R1's ARCCachePolicy, bit for bit (it is not textbook ARC).
///
/// State: target size p (a double, starts at 0), resident lists T1 (seen once) and T2 (seen
/// again), ghost lists B1 and B2 (keys of blocks evicted from T1 / T2). A key is in at most one
/// of the four lists. Node layout: ids [0, cap) are CPU slots (T1/T2 residents; flag bit set =
/// in T2), [cap, 2cap) the B1 ghost pool, [2cap, 3cap) the B2 ghost pool, then four sentinels.
/// One key_index maps every key (resident or ghost) to its node id.
///
/// R1 rules, including the quirks:
///  - insert: append at the T1 back and drop the key from B1/B2; no adaptation of p.
///  - touch (keys in reverse): T1 hit: pending -> re-append at the T1 back, else move to the
///    T2 back; T2 hit: move to back; B1 hit: p = min(p + max(1, |B2|/|B1|), cap), key to the
///    B1 back; B2 hit: p = max(p - max(1, |B1|/|B2|), 0), key to the B2 back. A ghost hit never
///    re-admits the block.
///  - evict(n): v = |T1|; n times: if v >= int(p) take the first idle unprotected unchosen T1
///    entry (v -= 1); if none was taken, the same from T2; if T2 has none, fail (no fallback
///    from T2 back to T1). Then T1 victims go to the B1 back, T2 victims to the B2 back, and
///    each ghost list is trimmed to cap, oldest first. Chosen entries only ever lie behind a
///    scan position, so each list is scanned once per call (same result as R1's rescans).
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
#include "proto/block_key.hpp"

namespace kvc::scheduler {

class arc_policy {
 public:
  explicit arc_policy(uint32_t capacity);
  arc_policy(const arc_policy&) = delete;
  arc_policy& operator=(const arc_policy&) = delete;

  uint32_t capacity() const noexcept { return cap_; }
  /// Number of resident (T1 + T2) blocks.
  uint32_t size() const noexcept { return t1_.size() + t2_.size(); }

  /// Slot of a resident key (T1 or T2), or npos. Ghosts are absent. No side effect.
  uint32_t find(const block_key& k) const {
    const uint32_t i = index_.find(k);
    return i < cap_ ? i : npos;
  }
  /// Node id of any key, ghosts included (>= capacity()), or npos.
  uint32_t find_id(const block_key& k) const { return index_.find(k); }
  /// Always inlined, see key_index::prefetch.
  [[gnu::always_inline]] void prefetch(const block_key& k) const { index_.prefetch(k); }
  block_node& node(uint32_t slot) noexcept { return nodes_[slot]; }
  const block_node& node(uint32_t slot) const noexcept { return nodes_[slot]; }

  /// Tracks `k` in `slot` as a pending store at the T1 back and drops it from B1/B2. A key
  /// already resident (repeated within one prepare_store) keeps its place and moves to `slot`;
  /// its previous slot is leaked, exactly as in R1. Returns false in that repeated-key case.
  bool insert(const block_key& k, uint32_t slot) {
    block_node& n = nodes_[slot];
    n.start_pending(k);
    const uint32_t old = index_.insert_or_replace(k, slot);
    if (old < cap_) {
      n.set_flag(nodes_[old].flag());
      resident_list(old).replace(old, slot);
      nodes_[old].ref = block_node::dead_ref;  // leaked
      return false;
    }
    if (old != npos) {
      ghost_list(old).erase(old);
      free_ghost(old);
    }
    t1_.push_back(slot);
    return true;
  }

  /// Forgets the resident block in `slot` (a failed store); ghosts are untouched.
  void remove(uint32_t slot) {
    resident_list(slot).erase(slot);
    index_.erase(nodes_[slot].key());
  }

  /// Node ids of many keys at once, with overlapped cache misses: < capacity() for resident
  /// blocks (the id is the slot), other values for ghosts or absent keys.
  void find_all(std::span<const block_key> keys, uint32_t* ids) const {
    index_.find_all(keys, ids);
  }

  /// No scout (see lru_policy::scout) for ARC's lists: measured, it only moved the stall.
  void scout() noexcept {}

  /// Version of the key -> id mapping (see key_index::version).
  uint64_t index_version() const noexcept { return index_.version(); }

  /// R1 touch of keys already resolved by find_all (ids stay valid: touch moves nodes
  /// between lists but never changes a key's id).
  void touch_ids(std::span<const uint32_t> ids) {
    for (size_t i = ids.size(); i-- > 0;) {
      const uint32_t id = ids[i];
      if (id == npos) continue;
      if (id < cap_) {
        block_node& n = nodes_[id];
        if (n.flag()) {
          t2_.move_to_back(id);
        } else if (n.ref < 0) {
          t1_.move_to_back(id);  // just prepared for store: not really seen twice
        } else {
          t1_.erase(id);
          n.set_flag(true);
          t2_.push_back(id);
        }
      } else if (id < 2 * cap_) {
        const double delta = std::max(1.0, double(b2_.size()) / double(b1_.size()));
        p_ = std::min(p_ + delta, double(cap_));
        b1_.move_to_back(id);
      } else {
        const double delta = std::max(1.0, double(b1_.size()) / double(b2_.size()));
        p_ = std::max(p_ - delta, 0.0);
        b2_.move_to_back(id);
      }
    }
  }

  /// Picks n victims (n >= 1) by the R1 rules above and moves them to the ghost lists. Fills
  /// `slots` / `keys` (replacing their contents) in eviction order. false: nothing changed.
  bool evict(uint32_t n, uint32_t epoch, std::vector<uint32_t>& slots,
             std::vector<block_key>& keys);

  /// Resets the protection epochs of slots [0, used) (the manager's epoch counter wrapped).
  void clear_epochs(uint32_t used) noexcept;

  /// Forgets every tracked block and ghost and sets p back to 0 (vLLM main's
  /// ARCCachePolicy.clear). The slot nodes keep stale contents; the owner marks them free.
  void clear() noexcept;

  // Introspection (tests): list contents from least to most recent, and p.
  double target_t1_size() const noexcept { return p_; }
  std::vector<block_key> t1_keys() const { return keys_of(t1_); }
  std::vector<block_key> t2_keys() const { return keys_of(t2_); }
  std::vector<block_key> b1_keys() const { return keys_of(b1_); }
  std::vector<block_key> b2_keys() const { return keys_of(b2_); }
  /// Heap bytes held: node array (slots + ghost pools) + key index.
  size_t memory_bytes() const noexcept;

 private:
  index_list<block_node>& resident_list(uint32_t slot) noexcept {
    return nodes_[slot].flag() ? t2_ : t1_;
  }
  index_list<block_node>& ghost_list(uint32_t id) noexcept { return id < 2 * cap_ ? b1_ : b2_; }
  /// Appends `k` at the back of ghost list `b` (pool `pool`), dropping its oldest entry first
  /// when it is full: the same as R1's append-all-then-trim.
  void push_ghost(const block_key& k, uint32_t pool);
  void free_ghost(uint32_t id) noexcept {
    const uint32_t pool = id < 2 * cap_ ? 0 : 1;
    nodes_[id].next = ghost_free_[pool];
    ghost_free_[pool] = id;
  }
  std::vector<block_key> keys_of(const index_list<block_node>& l) const;

  uint32_t cap_;
  double p_ = 0.0;
  std::unique_ptr<block_node[]> nodes_;
  index_list<block_node> t1_, t2_, b1_, b2_;
  key_index<block_node> index_;
  uint32_t ghost_used_[2] = {0, 0};        ///< ghost nodes ever handed out, per pool
  uint32_t ghost_free_[2] = {npos, npos};  ///< intrusive free lists (through `next`)
};

}  // namespace kvc::scheduler
