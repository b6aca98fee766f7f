#pragma once
/// offload_manager: the ledger of the node's pinned CPU pool, a bit-exact port of vLLM's
/// CPUOffloadingManager (+ LRUCachePolicy / ARCCachePolicy, + FilterReusedOffloadingManager when
/// store_threshold >= 2) at the reference revision R1 (docs: shared/reference/vllm_offload.md).
///
/// Every tracked block has a ref count: -1 = store in flight, 0 = ready and idle (the only
/// evictable state), n > 0 = n loads reading it. Slots are handed out fresh-ids-upward first,
/// then from a LIFO free list.
///
/// Errors: a call that breaks a precondition (loading a missing or pending key, completing a
/// load that is not in flight) returns an error and changes nothing.
///
/// Returned spans point into buffers owned by the manager and stay valid until the next
/// non-const call. Not thread-safe: one actor owns it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "actors/scheduler/manager_config.hpp"
#include "proto/block_key.hpp"
#include "proto/ids.hpp"
#include "proto/kv_event.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

/// Result of a successful prepare_store. `keys` are the keys to store (absent ones, in input
/// order), `slots[i]` is the slot for keys[i], `evicted` the victims in eviction order.
struct store_plan {
  std::span<const block_key> keys;
  std::span<const cpu_slot> slots;
  std::span<const block_key> evicted;
};

class offload_manager {
 public:
  /// Validates the config (see validate()) and builds a manager.
  static result<std::unique_ptr<offload_manager>> create(const manager_config& cfg);
  virtual ~offload_manager() = default;

  /// True iff the key is present and ready. Counts the lookup in the reuse filter.
  virtual bool lookup(const block_key& key) = 0;

  /// lookup() of keys[0], keys[1], ... up to and including the first miss; returns the number
  /// of hits (R1's maximal-prefix scan, one virtual call per batch). Only the keys actually
  /// looked up are counted by the reuse filter.
  virtual uint32_t lookup_prefix(std::span<const block_key> keys) = 0;

  /// Pins every key for reading (ref += 1) and returns their slots in key order.
  /// Error, nothing changed, if any key is absent or not ready.
  virtual result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> keys) = 0;

  /// Unpins (ref -= 1). Error, nothing changed, if any key is absent or has no load in flight.
  virtual status complete_load(std::span<const block_key> keys) = 0;

  /// True iff some key is tracked with a load in flight (ref > 0). No side effect (the reuse
  /// filter does not count it). The connector's `_blocks_being_loaded` check: it is the only
  /// caller of prepare_load, so "pinned by a load" and "being loaded" are the same keys.
  virtual bool any_loading(std::span<const block_key> keys) = 0;

  /// Recency update, applied in reverse order so keys[0] ends most recent (policy-specific).
  virtual void touch(std::span<const block_key> keys) = 0;

  /// touch(keys) for a caller that keeps, next to its keys, the slot each one was last seen in
  /// (hints.size() == keys.size(); any value is allowed, npos for unknown). A hint is only a
  /// guess: the manager uses it when that slot still holds the key and looks the key up
  /// otherwise, then writes back each key's slot (npos: not tracked). Same effect as touch();
  /// a caller touching the same keys repeatedly (a request's blocks, every stored block) skips
  /// the key lookups. The default ignores the hints.
  virtual void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) {
    touch(keys);
  }

  /// Slots for the keys not yet present, evicting idle unprotected blocks if needed.
  /// std::nullopt when eviction cannot free enough; then nothing changed.
  virtual std::optional<store_plan> prepare_store(std::span<const block_key> keys) = 0;

  /// Completes stores of present, pending keys. success: ready + one stored event;
  /// failure: removed and slot freed, no event. Other keys are ignored (as in R1).
  virtual void complete_store(std::span<const block_key> keys, bool success) = 0;

  /// Forgets every block (vLLM main's CPUOffloadingManager.reset_cache): every slot is free
  /// again and handed out from 0 upward as in a new pool, the policy is empty (ARC: its ghosts
  /// and target size too). As in vLLM main, no event is recorded for the blocks dropped (the
  /// events recorded before stay to be taken; a subscriber learns of the reset from the
  /// publisher's AllBlocksCleared) and the reuse filter keeps its counts (a reset drops bytes,
  /// not how often keys were looked up). Blocks with a load or store in flight go too: the
  /// caller must never complete those jobs here afterwards (planner::reset's stale jobs).
  virtual void reset() = 0;

  /// Moves the recorded events out (empty when events are disabled).
  virtual std::vector<kv_event> take_events() = 0;

  /// Allocation-free take_events(): calls fn(kind, keys) for each recorded event in order,
  /// then forgets them. `keys` is valid only during the call; fn must not call the manager.
  using event_visitor = std::function<void(kv_event_kind, std::span<const block_key>)>;
  virtual void drain_events(const event_visitor& fn) = 0;

  /// Number of slots in the pool and number of tracked (present) blocks.
  virtual uint32_t capacity() const noexcept = 0;
  virtual uint32_t size() const noexcept = 0;
  /// Heap bytes of the ledger proper: node arrays, key indexes, reuse tracker (not the reused
  /// call buffers, which scale with the largest batch and the undrained events).
  virtual size_t memory_bytes() const noexcept = 0;
  /// Blocks prepare_store left out because the reuse filter had not seen them store_threshold
  /// times (vLLM's stores_skipped); 0 without the filter.
  virtual uint64_t stores_skipped() const noexcept { return 0; }
  /// Tracked blocks in use: a store in flight or loads reading them (neither free nor idle).
  /// 0 at quiescence; anything else is a leaked pin. Scans the ledger: for checks, not steps.
  virtual uint32_t busy() const noexcept = 0;
};

}  // namespace kvc::scheduler
