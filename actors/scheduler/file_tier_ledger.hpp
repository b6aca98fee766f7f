#pragma once
/// file_tier_ledger: the bookkeeping of the file tier, the second tier behind the CPU pool
/// (vLLM main's `TieringOffloadingManager` with its `fs` secondary tier, semantics only). It makes
/// every decision about the tier and does none of the I/O: which blocks cascade from the pool to
/// files, which files are evicted to keep `capacity_bytes`, what a lookup answers while the file
/// is being checked, and what a promotion's outcome does to the ledger. Pure: no I/O, no threads,
/// no clock. Not thread-safe: the owner of the planner owns it.
///
/// Blocks. A tracked block is in one of two states: `writing` (a cascade in flight: its file is
/// being written) or `ready` (its file is complete). A ready block may be read by promotions in
/// flight (`readers` > 0); only a ready block with no reader is evictable. Every tracked block
/// holds one unit of capacity (`capacity_bytes / block_file_bytes` blocks), reserved when its
/// cascade is accepted, so the files on disk never exceed the capacity even while writes are in
/// flight. Recency is LRU: a block moves to the most-recent end when its cascade completes, when a
/// lookup finds it and when a promotion of it succeeds; eviction takes the least recent evictable
/// blocks.
///
/// Cascade (pool -> files). A block is offered once its pool store has completed; the caller
/// keeps the block's pool slot pinned until complete_cascade, so the bytes are on disk before the
/// slot can be reused and an eviction from the pool never has to wait for the disk (vLLM's
/// "offload to all tiers" on store completion). A block already tracked is not written again.
/// Back-pressure: at most `max_pending_cascades` cascades are in flight; an offer past that is
/// skipped and counted (`cascades_skipped_queue_full`), as is one for which eviction cannot free
/// a unit (`cascades_skipped_no_room`: every block is being written or read). Nothing is queued
/// without bound and nothing waits. A failed cascade drops the block (its file, if any, is to be
/// removed); a successful one gives a stored event.
///
/// Lookup (vLLM's HIT_PENDING / RETRY). A key the ledger does not track is a miss at once. For a
/// tracked key the answer comes from an asynchronous check of its file: the first lookup queues
/// the key for that check (take_lookup_batch) and answers `ask_again`, as does every lookup until
/// on_lookup_result gives the verdict; then `hit` or `miss` until the last request that asked
/// finishes (request_finished forgets the verdict). A verdict that the file is gone or bad drops
/// the block. A block still being written answers `ask_again` without queuing a check.
///
/// Promotion (files -> pool). begin_promotion(key) turns a hit into a promotion: the block gets
/// a reader (it cannot be evicted while read). complete_promotion(key, ok): ok moves it to the
/// most-recent end; a failure (I/O error, missing, short or corrupt file) drops the block, and its
/// verdict becomes `miss` so the request is recomputed instead of promoting again.
///
/// Dropped and evicted blocks come back from take_removed() (files for the caller to delete) and
/// give removed events; on_pool_evicted counts pool evictions of blocks with no file copy.
#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "proto/block_key.hpp"
#include "proto/kv_event.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

struct file_tier_limits {
  uint64_t capacity_bytes = 0;    ///< bytes the tier's files may take
  uint64_t block_file_bytes = 0;  ///< bytes one block's file takes (header + KV + checksum)
  uint32_t max_pending_cascades = 0;  ///< cascades in flight at most (back-pressure bound)
};

/// What a lookup of the file tier answers.
enum class tier_lookup : uint8_t {
  miss = 0,
  hit = 1,
  ask_again = 2,  ///< the file is being checked or written: ask again next step
};

std::string_view to_string(tier_lookup l) noexcept;

/// Cumulative counters (vLLM's tiering metrics where they exist).
struct file_tier_stats {
  uint64_t queries = 0;                     ///< lookups (vLLM block_queries)
  uint64_t hits = 0;                        ///< lookups answered hit (vLLM block_hits)
  uint64_t cascades_offered = 0;            ///< blocks offered for a cascade
  uint64_t cascades_started = 0;            ///< blocks accepted for writing
  uint64_t cascades_ok = 0;
  uint64_t cascades_failed = 0;             ///< vLLM cascade_job_failures (per block)
  uint64_t cascades_skipped_queue_full = 0;  ///< back-pressure: too many cascades in flight
  uint64_t cascades_skipped_no_room = 0;     ///< nothing evictable to make room
  uint64_t promotions_started = 0;
  uint64_t promotions_ok = 0;
  uint64_t promotions_failed = 0;           ///< vLLM promotion_job_failures (per block)
  uint64_t evictions = 0;                   ///< blocks evicted for capacity
  uint64_t dropped_bad_file = 0;            ///< blocks whose file check said gone or bad
  uint64_t pool_evictions_without_file = 0;  ///< pool evictions of blocks not in the tier

  friend bool operator==(const file_tier_stats&, const file_tier_stats&) = default;
};

class file_tier_ledger {
 public:
  /// errc::invalid_argument when block_file_bytes is 0, max_pending_cascades is 0 or the
  /// capacity holds no block.
  static result<file_tier_ledger> create(const file_tier_limits& limits);

  /// Blocks the file store found at start (a restart), oldest first: tracked as ready. Those
  /// beyond the capacity are evicted at once (the oldest first; see take_removed). No events:
  /// their stored events were given by the run that wrote them. Keys already tracked are ignored.
  void adopt(std::span<const block_key> oldest_first);

  // --- cascade ---
  /// The keys among `keys` (blocks whose pool store completed) to write now, in input order:
  /// not tracked yet, within the back-pressure bound and with room (evicting idle blocks as
  /// needed). Each returned key is tracked as writing. The span is valid until the next call.
  std::span<const block_key> offer_cascade(std::span<const block_key> keys);
  /// The cascade of `key` ended: ok -> ready (stored event); failed -> dropped (take_removed).
  /// errc::precondition_failed, nothing changed, when `key` has no cascade in flight.
  status complete_cascade(const block_key& key, bool ok);

  // --- lookup ---
  /// See the header. `request` names who asks (for request_finished).
  tier_lookup lookup(const block_key& key, std::string_view request);
  /// The keys queued for a check of their file since the last call (each once), in order.
  std::vector<block_key> take_lookup_batch();
  /// The check of a queued key's file ended. found == false drops the block. Keys with no check
  /// pending (forgotten since) are ignored, except that a missing file still drops the block.
  void on_lookup_result(const block_key& key, bool found);
  /// Forgets the verdicts only `request` still needed.
  void request_finished(std::string_view request);

  // --- promotion ---
  /// Starts a promotion of a block whose lookup answered hit: the block gets a reader.
  /// errc::precondition_failed, nothing changed, when the block is not ready.
  status begin_promotion(const block_key& key);
  /// The promotion ended. ok: most recent. failed: the block is dropped and its verdict is miss.
  /// errc::precondition_failed, nothing changed, when no promotion of `key` is in flight.
  status complete_promotion(const block_key& key, bool ok);

  // --- pool ---
  /// The pool evicted `keys`: counts those the tier does not hold (lost for good).
  void on_pool_evicted(std::span<const block_key> keys);

  /// Keys whose files are to be removed (evicted or dropped), in order, since the last call.
  std::vector<block_key> take_removed();
  /// Stored / removed events (medium fs) since the last call.
  std::vector<kv_event> take_events();

  // --- introspection ---
  uint32_t capacity_blocks() const noexcept { return capacity_blocks_; }
  /// Tracked blocks (writing or ready): the units of capacity in use.
  uint32_t size() const noexcept { return static_cast<uint32_t>(blocks_.size()); }
  uint32_t pending_cascades() const noexcept { return pending_cascades_; }
  /// Whether `key` is tracked and ready.
  bool ready(const block_key& key) const;
  /// Readers of a tracked key (promotions in flight); 0 when not tracked.
  uint32_t readers(const block_key& key) const;
  /// Keys with a verdict or a check pending.
  size_t lookup_states() const noexcept { return lookups_.size(); }
  const file_tier_stats& stats() const noexcept { return stats_; }
  /// Tracked keys from least to most recent.
  std::vector<block_key> lru_order() const;

 private:
  explicit file_tier_ledger(const file_tier_limits& limits);

  enum class block_state : uint8_t { writing, ready };
  struct block {
    block_state state = block_state::writing;
    uint32_t readers = 0;
    bool bad = false;  ///< its file was found gone or bad while read: dropped after the last read
    std::list<block_key>::iterator at;  ///< place in lru_
  };
  enum class verdict : uint8_t { pending, hit, miss };
  struct lookup_state {
    verdict v = verdict::pending;
    std::unordered_set<std::string> requests;
  };

  /// Frees one unit of capacity by evicting the least recent idle ready block.
  bool evict_one();
  void track(const block_key& key, block_state state);
  /// Stops tracking `key` (its file goes to take_removed, a removed event if it was ready).
  void drop(const block_key& key);
  void make_recent(block& b);
  void record(kv_event_kind kind, const block_key& key);

  uint32_t capacity_blocks_;
  uint32_t max_pending_;
  uint32_t pending_cascades_ = 0;
  std::list<block_key> lru_;  ///< front: least recent
  std::unordered_map<block_key, block, block_key_hash> blocks_;
  std::unordered_map<block_key, lookup_state, block_key_hash> lookups_;
  std::unordered_map<std::string, std::vector<block_key>> request_keys_;
  std::vector<block_key> lookup_batch_;
  std::vector<block_key> accepted_;
  std::vector<block_key> removed_;
  std::vector<kv_event> events_;
  file_tier_stats stats_;
};

}  // namespace kvc::scheduler
