#pragma once
/// key_index: block_key -> node id, a fixed-size open-addressing table whose 8-byte entries
/// hold a 32-bit hash tag and the node id; the key itself is read from the node array, which
/// must outlive the index and must not move.
///
/// Ordered linear probing (Amble & Knuth), invariants:
///  - tag = high 32 bits of a 64-bit hash of the key; an entry's home slot is
///    (tag * size) >> 32, so homes grow with tags and the tag alone locates an entry's home;
///  - every entry sits at or after its home with no empty slot in between, and each run of
///    occupied slots is sorted by tag (equal tags in any order). A search scans from the home
///    while tags are smaller: it stops at the first larger tag or empty slot, so a miss costs
///    no more than a hit. Insertion shifts the rest of the run right by one; deletion shifts
///    displaced successors back by one (no tombstones);
///  - there is no wrap-around: homes lie in [0, size) and runs may spill into an overflow tail
///    whose last slot is always kept empty (the tail grows in the rare case a run reaches it).
///  - sized once for `max_entries` at load <= 4/7 (14 bytes per entry) and never rehashed; the
///    caller (a policy with a fixed capacity) guarantees the bound.
/// Slots are stored complemented so that an empty slot is 0: a fresh table is untouched zero
/// pages. find_all() resolves a batch in passes (prefetch every home slot, find tags and
/// prefetch nodes, compare keys) so that the cache misses of a batch overlap. Not thread-safe.
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include "proto/block_key.hpp"

namespace kvc::scheduler {

template <class Node>
class key_index {
 public:
  static constexpr uint32_t npos = UINT32_MAX;

  key_index(const Node* nodes, size_t max_entries)
      : nodes_(nodes),
        size_(max_entries + max_entries * 3 / 4 + 8),
        phys_(size_ + 32 + size_ / 64) {
    slots_.reset(static_cast<uint64_t*>(std::calloc(phys_ + pad, sizeof(uint64_t))));
    if (!slots_) throw std::bad_alloc{};
  }

  /// Bumped by every change of the key -> id mapping (insert, replace, erase), so callers can
  /// tell whether ids they resolved earlier are still valid.
  uint64_t version() const noexcept { return version_; }

  /// The id holding `k`, or npos.
  uint32_t find(const block_key& k) const {
    const size_t i = position(k);
    return i == npos_pos ? npos : id_of(slots_[i]);
  }

  /// Indexes `k` at node `id`. If `k` is already indexed, its entry is re-pointed to `id` and
  /// the previous id is returned; else npos. Always inlined: GCC kept it out of line, and the
  /// call cost ~16 instructions per insert (callgrind), a fifth of the insert itself.
  [[gnu::always_inline]] uint32_t insert_or_replace(const block_key& k, uint32_t id) {
    const uint32_t tag = tag_of(k);
    const uint64_t first = uint64_t{tag} << 32;
    size_t i = static_cast<size_t>(skip_smaller(slots_.get() + home(tag), first) - slots_.get());
    for (; value(i) >> 32 == tag && value(i) != empty_value; ++i) {
      const uint32_t old = static_cast<uint32_t>(value(i));
      if (has_key(old, k)) {
        slots_[i] = ~(first | id);  // same tag, so the run stays sorted
        ++version_;
        return old;
      }
    }
    // i is the sorted position: the new entry goes there and the run's tail moves right by
    // one, up to the first empty slot (usually 0-2 entries at this load: one pass, no memmove).
    uint64_t* s = slots_.get();
    uint64_t carry = ~(first | id);
    size_t j = i;
    do {
      const uint64_t displaced = s[j];
      s[j++] = carry;
      carry = displaced;
    } while (carry != 0);
    if (j == phys_) grow_tail();  // the last slot was taken: it must stay empty
    ++count_;
    ++version_;
    return npos;
  }

  /// Re-points the entry of `k` (which must exist) to `id`.
  void replace(const block_key& k, uint32_t id) {
    const size_t i = position(k);
    slots_[i] = ~((value(i) & 0xffffffff00000000ULL) | id);
    ++version_;
  }

  /// Removes the entry of `k` (which must exist), shifting displaced successors back.
  void erase(const block_key& k) { erase_at(position(k)); }

  /// Removes the entry of node `id`, whose key has tag `tag` (tag_of(key); the entry must
  /// exist). Cheaper than erase(key) when the caller knows both: no key compare.
  void erase_id(uint32_t tag, uint32_t id) {
    const uint64_t entry = ~((uint64_t{tag} << 32) | id);
    const uint64_t* p = skip_smaller(slots_.get() + home(tag), uint64_t{tag} << 32);
    for (; *p != entry; ++p) assert((~*p >> 32) == tag && "erase_id: no such entry");
    erase_at(static_cast<size_t>(p - slots_.get()));
  }

  /// Fetches the home slot of `k` (of a key with tag `tag`) into the cache. Always inlined:
  /// a function whose only effect is a prefetch counts as side-effect free to GCC, so an
  /// out-of-line call to it is deleted as dead code (measured: the call compiled to nothing).
  [[gnu::always_inline]] void prefetch(const block_key& k) const { prefetch_tag(tag_of(k)); }
  [[gnu::always_inline]] void prefetch_tag(uint32_t tag) const {
    __builtin_prefetch(&slots_[home(tag)]);
  }

  /// out[i] = find(keys[i]) for every key (out has room for keys.size()), in chunks of 16
  /// keys and three passes so that the cache misses of a chunk overlap in two waves: hash and
  /// prefetch every home slot; scan each run for the first entry with the key's tag and
  /// prefetch its node; compare keys (a 32-bit tag collision, rare, falls back to a scan).
  /// The table must not change while the ids are used.
  void find_all(std::span<const block_key> keys, uint32_t* ids) const {
    find_all(keys, ids, [] {});
  }
  /// The same, calling `between()` after each of a chunk's first two passes: work whose own
  /// cache misses then overlap the chunk's (the LRU policy's scout).
  template <class Between>
  void find_all(std::span<const block_key> keys, uint32_t* ids, Between&& between) const {
    constexpr size_t chunk = 16;
    const size_t n = keys.size();
    const uint64_t* slots = slots_.get();
    const Node* nodes = nodes_;
    uint32_t tags[chunk];
    const uint64_t* at[chunk];
    for (size_t base = 0; base < n; base += chunk) {
      const size_t m = n - base < chunk ? n - base : chunk;
      const block_key* k = keys.data() + base;
      uint32_t* out = ids + base;
      for (size_t j = 0; j < m; ++j) {
        tags[j] = tag_of(k[j]);
        at[j] = slots + home(tags[j]);
        __builtin_prefetch(at[j]);
      }
      between();
      for (size_t j = 0; j < m; ++j) {
        const uint64_t first = uint64_t{tags[j]} << 32;
        const uint64_t* p = skip_smaller(at[j], first);
        const uint64_t v = ~*p;
        at[j] = p;
        // A tag match (an empty slot reads as tag 0xffffffff with id npos: no match).
        const bool match = (v >> 32) == tags[j] && v != empty_value;
        out[j] = match ? static_cast<uint32_t>(v) : npos;
        if (match) __builtin_prefetch(&nodes[static_cast<uint32_t>(v)]);
      }
      between();
      for (size_t j = 0; j < m; ++j) {
        const uint32_t id = out[j];
        if (id == npos || (nodes[id].key_lo == k[j].lo && nodes[id].key_hi == k[j].hi)) continue;
        out[j] = npos;  // tag collision: scan the rest of the equal-tag entries
        const uint64_t* p = at[j];
        for (uint64_t v = ~*++p; (v >> 32) == tags[j] && v != empty_value; v = ~*++p) {
          const Node& node = nodes[static_cast<uint32_t>(v)];
          if (node.key_lo == k[j].lo && node.key_hi == k[j].hi) {
            out[j] = static_cast<uint32_t>(v);
            break;
          }
        }
      }
    }
  }

  /// High 32 bits of a multiplicative hash of both halves (keys are hashes already; the
  /// multiplications also spread structured test keys). Public for tests.
  static uint32_t tag_of(const block_key& k) noexcept {
    const uint64_t x = k.hi ^ (k.lo * 0x9e3779b97f4a7c15ULL);
    return static_cast<uint32_t>((x * 0xd6e8feb86659fd93ULL) >> 32);
  }

  /// Removes every entry (the table keeps its size); bumps the version.
  void clear() noexcept {
    std::memset(slots_.get(), 0, (phys_ + pad) * sizeof(uint64_t));
    count_ = 0;
    ++version_;
  }

  size_t size() const noexcept { return count_; }
  /// Heap bytes of the table.
  size_t memory_bytes() const noexcept { return (phys_ + pad) * sizeof(uint64_t); }

 private:
  static constexpr uint64_t empty_value = UINT64_MAX;  ///< value() of an empty slot
  static constexpr size_t npos_pos = SIZE_MAX;
  /// Always-empty slots past the table, so that a probe may read one slot ahead.
  static constexpr size_t pad = 1;
  struct free_deleter {
    void operator()(uint64_t* p) const noexcept { std::free(p); }
  };

  size_t home(uint32_t tag) const noexcept {
    return static_cast<size_t>((uint64_t{tag} * size_) >> 32);
  }
  /// The first slot at or after i whose value is not below `first` (the sorted position of a
  /// tag, from its home). Runs are short, so the first two slots are compared without a branch
  /// (a loop exit that depends on the data mispredicts often); see pad.
  static const uint64_t* skip_smaller(const uint64_t* p, uint64_t first) noexcept {
    const size_t n = size_t{~p[0] < first} + size_t{~p[1] < first};
    p += n;
    if (n == 2) [[unlikely]]
      while (~*p < first) ++p;
    return p;
  }
  /// (tag << 32 | id) of slot i; empty_value for an empty slot.
  uint64_t value(size_t i) const noexcept { return ~slots_[i]; }
  static uint32_t id_of(uint64_t stored) noexcept { return static_cast<uint32_t>(~stored); }
  bool has_key(uint32_t id, const block_key& k) const noexcept {
    return nodes_[id].key_lo == k.lo && nodes_[id].key_hi == k.hi;
  }
  /// Slot index holding `k`, or npos_pos.
  size_t position(const block_key& k) const {
    const uint32_t tag = tag_of(k);
    const uint64_t first = uint64_t{tag} << 32;
    size_t i = static_cast<size_t>(skip_smaller(slots_.get() + home(tag), first) - slots_.get());
    for (; value(i) >> 32 == tag && value(i) != empty_value; ++i)
      if (has_key(static_cast<uint32_t>(value(i)), k)) return i;
    return npos_pos;
  }
  /// Empties slot i and shifts displaced successors back by one.
  void erase_at(size_t i) {
    for (;;) {
      const uint64_t next = slots_[i + 1];
      if (next == 0 || home(static_cast<uint32_t>(~next >> 32)) == i + 1) break;
      slots_[i] = next;
      ++i;
    }
    slots_[i] = 0;
    --count_;
    ++version_;
  }

  /// Lengthens the overflow tail (a run reached it); entries keep their positions.
  void grow_tail() {
    const size_t more = 32 + phys_ / 8;
    auto* p =
        static_cast<uint64_t*>(std::realloc(slots_.get(), (phys_ + more + pad) * sizeof(uint64_t)));
    if (!p) throw std::bad_alloc{};
    (void)slots_.release();
    slots_.reset(p);
    std::memset(p + phys_, 0, (more + pad) * sizeof(uint64_t));
    phys_ += more;
  }

  const Node* nodes_;
  size_t size_;  ///< home range [0, size)
  size_t phys_;  ///< allocated slots (home range + overflow tail)
  size_t count_ = 0;
  uint64_t version_ = 0;
  std::unique_ptr<uint64_t[], free_deleter> slots_;
};

}  // namespace kvc::scheduler
