#pragma once
/// cpu_offload_manager<Policy>: the offload_manager implementation, vLLM R1's
/// CPUOffloadingManager (+ FilterReusedOffloadingManager when store_threshold >= 2) over an
/// eviction policy (lru_policy or arc_policy), with the policy as a template parameter so that
/// per-key work has no virtual call.
///
/// Slot pool: a high-water mark plus a LIFO free list threaded through the free slots' nodes
/// (fresh ids upward first, then the most recently freed); a free slot's node has
/// ref == block_node::dead_ref. prepare_store protects its input by stamping the present keys'
/// nodes with a fresh epoch instead of building a set. All outputs (spans, events) live in
/// buffers reused from call to call: once warm, no call allocates except take_events() (which
/// builds its result; drain_events() does not).
///
/// Resolving keys to slots is most of the work, so it is batched and cached. None of this is
/// visible in results (tests compare against uncached twins):
///  - resolve() looks a batch up with key_index::find_all and keeps the answer (the "memo").
///    The next call reuses it if the index version is unchanged and its keys are, byte for
///    byte, a sub-range of the memo's keys: the connector's touch -> lookup -> load -> store
///    sequence on one key list resolves the list once.
///  - store() changes the index only by inserting its absent keys and evicting blocks that
///    are not among its keys, so it patches the memo (new slots for the inserted keys, other
///    entries re-checked against their nodes) instead of dropping it.
///  - prepare_load / prepare_store remember the slots of the batch they hand out; the matching
///    complete_* call recalls them if every slot is still a live node holding its key (live
///    nodes hold distinct keys, so that slot is the key's slot).
///
/// Precondition errors (prepare_load / complete_load) are detected before anything changes.
/// Not thread-safe: one actor owns it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "actors/scheduler/arc_policy.hpp"
#include "actors/scheduler/lru_policy.hpp"
#include "actors/scheduler/manager_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "actors/scheduler/reuse_tracker.hpp"

namespace kvc::scheduler {

template <class Policy>
class cpu_offload_manager final : public offload_manager {
 public:
  /// Validates the config and builds the manager (errc::capacity_exhausted if the node arrays
  /// cannot be reserved).
  static result<std::unique_ptr<cpu_offload_manager>> create(const manager_config& cfg);

  /// `cfg` must pass validate().
  explicit cpu_offload_manager(const manager_config& cfg);
  cpu_offload_manager(const cpu_offload_manager&) = delete;
  cpu_offload_manager& operator=(const cpu_offload_manager&) = delete;

  bool lookup(const block_key& key) override;
  uint32_t lookup_prefix(std::span<const block_key> keys) override;
  bool any_loading(std::span<const block_key> keys) override;
  result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> keys) override;
  status complete_load(std::span<const block_key> keys) override;
  void touch(std::span<const block_key> keys) override;
  void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) override;
  std::optional<store_plan> prepare_store(std::span<const block_key> keys) override;
  void complete_store(std::span<const block_key> keys, bool success) override;
  void reset() override;
  std::vector<kv_event> take_events() override;
  void drain_events(const event_visitor& fn) override;
  uint32_t capacity() const noexcept override { return cap_; }
  uint32_t size() const noexcept override { return policy_.size(); }
  size_t memory_bytes() const noexcept override;
  uint64_t stores_skipped() const noexcept override { return skipped_; }
  uint32_t busy() const noexcept override;

  // Introspection (tests, benchmarks).
  const Policy& policy() const noexcept { return policy_; }
  /// The reuse filter's tracker, or nullptr when the filter is off.
  const reuse_tracker* tracker() const noexcept { return tracker_.get(); }
  /// Slots neither tracked nor leaked: never used + on the free list.
  uint32_t free_slots() const noexcept { return cap_ - high_water_ + free_count_; }
  /// Ref count of a tracked key (-1 store in flight, 0 idle, n loads), nullopt if absent.
  std::optional<int32_t> ref_count(const block_key& key) const;

 private:
  static constexpr uint32_t npos = UINT32_MAX;
  struct event_record {
    kv_event_kind kind;
    uint32_t begin;
    uint32_t count;
  };

  std::optional<store_plan> store(std::span<const block_key> keys);
  /// The node ids of `keys` (>= capacity: absent). Reuses the previous resolution when the
  /// index has not changed since and `keys` is, by content, a sub-range of the keys resolved
  /// then (the connector's touch -> lookup -> load / store sequence on one key list). The span
  /// is valid until the next resolve().
  std::span<const uint32_t> resolve(std::span<const block_key> keys);
  uint32_t allocate_slot() noexcept;
  void free_slot(uint32_t slot) noexcept;
  /// After store() changed the index: brings the memo of resolve() up to date instead of
  /// dropping it (so the connector's touch after a store does not resolve again).
  void patch_memo(bool had_duplicates);
  /// Remembers the slots of a batch that will come back (a load or store now in flight), so
  /// that its complete_* call can skip the index: see recall().
  void remember(std::span<const block_key> keys, std::span<const uint32_t> slots);
  /// The slots remembered for a batch like `keys` (same first key and length), if every one is
  /// a live node holding its key (then it is the key's slot: live nodes hold distinct keys);
  /// nullptr otherwise. Valid until the next remember().
  const uint32_t* recall(std::span<const block_key> keys) const;
  /// Room for n ids at the start of the memo (grows only).
  uint32_t* memo_room(size_t n);
  /// Makes the ids written to memo_room(keys.size()) the memo of `keys` (caller's buffer).
  void memo_keep(std::span<const block_key> keys);
  static size_t recent_index(std::span<const block_key> keys) noexcept;
  uint32_t next_epoch() noexcept;

  static constexpr int32_t free_ref = block_node::dead_ref;

  uint32_t cap_;
  Policy policy_;
  std::unique_ptr<reuse_tracker> tracker_;
  uint32_t threshold_;
  uint64_t skipped_ = 0;  // blocks the reuse filter left out
  bool events_on_;
  uint32_t high_water_ = 0;
  uint32_t free_head_ = npos;
  uint32_t free_count_ = 0;
  uint32_t epoch_ = 0;

  std::vector<block_key> filtered_;
  std::vector<block_key> to_store_;
  std::vector<block_key> evicted_;
  std::vector<cpu_slot> store_slots_;
  std::vector<cpu_slot> load_slots_;
  std::vector<uint32_t> victims_;
  std::vector<block_key> memo_keys_;  ///< keys of the last resolve() ([0, memo_size_))
  std::vector<uint32_t> memo_ids_;    ///< their ids
  size_t memo_size_ = 0;
  uintptr_t memo_src_ = 0;            ///< where the caller kept those keys
  uint64_t memo_version_ = UINT64_MAX;  ///< index version they were resolved at
  size_t memo_offset_ = 0;            ///< offset of the span the last resolve() returned
  size_t memo_len_ = 0;               ///< and its length
  bool memo_served_ = false;          ///< the last resolve() came from the memo (not recall)
  std::vector<uint32_t> absent_at_;   ///< store(): position in `keys` of each to_store_ key
  std::vector<block_key> miss_keys_;  ///< touch_hinted(): keys whose hint was wrong (grow only)
  std::vector<uint32_t> miss_at_;     ///< and their positions
  std::vector<uint32_t> miss_ids_;    ///< and the ids found for them
  /// Slots of recent batches, direct-mapped by (first key, length).
  std::vector<std::vector<uint32_t>> recent_;
  std::vector<block_key> event_keys_;
  std::vector<event_record> events_;
};

extern template class cpu_offload_manager<lru_policy>;
extern template class cpu_offload_manager<arc_policy>;

using lru_offload_manager = cpu_offload_manager<lru_policy>;
using arc_offload_manager = cpu_offload_manager<arc_policy>;

}  // namespace kvc::scheduler
