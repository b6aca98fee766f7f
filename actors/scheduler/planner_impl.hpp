#pragma once
/// planner::impl: the planner's state and the declarations of its steps, shared by the two
/// files that define them (planner.cpp: construction, lookups, allocation, request_finished;
/// planner_steps.cpp: build_connector_meta, stores, job completion). Internal to
/// actors/scheduler (not installed).
#include <absl/container/flat_hash_map.h>
#include <absl/container/flat_hash_set.h>
#include <absl/container/inlined_vector.h>
#include <absl/hash/hash.h>

#include <algorithm>
#include <string>
#include <utility>

#include "actors/scheduler/planner.hpp"

namespace kvc::scheduler {

namespace planner_detail {

inline std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

/// Adds `what` to a call's list of rejected results (the first error's code is returned).
inline void reject(std::string& rejected, errc& first_error, errc code, const std::string& what) {
  if (first_error == errc::ok) first_error = code;
  if (!rejected.empty()) rejected += "; ";
  rejected += what;
}

}  // namespace planner_detail

/// The connector's state. Requests live in a dense array of slots (reused, with their vectors'
/// capacity, after a request is gone) found through a small id -> slot map, so the per-step
/// walk over running requests touches little memory; jobs refer to their request's slot (a
/// request's state outlives its jobs). Scratch buffers are reused across calls so that a steady
/// step allocates only for the jobs it emits.
class planner::impl {
 public:
  impl(const connector_geometry& geo, bool prefix_caching, std::unique_ptr<offload_manager> manager,
       std::optional<file_tier_ledger> tier, bool tier_events)
      : geo_(geo),
        prefix_caching_(prefix_caching),
        manager_(std::move(manager)),
        tier_(std::move(tier)),
        tier_events_(tier_events) {}

  match_result get_num_new_matched_tokens(const request_view& req, uint32_t num_computed);
  status update_state_after_alloc(const request_view& req, const block_table_view& blocks,
                                  uint32_t num_external);
  result<connector_metadata> build_connector_meta(const step_input& in);
  status update_connector_output(const connector_output& out);
  status update_connector_output(const request_output& out);
  /// update_connector_output's releases_requests role.
  status release_requests(const request_output& out);
  /// Marks the loads in flight that `invalid` (the engine's failed blocks) names engine_failed.
  void note_engine_failures(std::span<const gpu_block> invalid);
  bool request_finished(std::string_view req_id);
  status reset();

  static constexpr uint32_t npos = UINT32_MAX;

  /// Per-request state. The fields every decode step reads for every running request (the id
  /// check of the order prediction, whether it finished, the key count, the store cursor) share
  /// the first cache line; the rest is read when a block fills or a job ends.
  struct alignas(64) request_state {
    std::string id;
    std::vector<block_key> keys;       ///< one per full offloaded block so far
    uint32_t cursor = 0;               ///< next offloaded block index to consider for storing
    bool finished = false;             ///< request_finished was called; kept for its jobs
    std::vector<gpu_block> block_ids;  ///< all GPU block ids of the request
    std::vector<cpu_slot> slot_hints;  ///< per key: its slot at the last touch (touch_hinted)
    std::vector<job_id> jobs;          ///< every job in flight, oldest first (for flush)
    std::optional<job_id> load_job;    ///< recorded or in flight
    uint32_t local_computed = 0;       ///< num_computed at the last get_num_new_matched_tokens
    bool delay_free = false;           ///< request_finished returned true: owe finished_sending
    bool store_entry = false;          ///< a store job was planned (R1: in _reqs_being_stored)
    bool owed = false;  ///< in owed_sending_: finished, delay_free, nothing in flight
  };
  struct job_state {
    uint32_t slot = 0;  ///< the request's slot
    transfer_kind kind = transfer_kind::load;
    /// The job's keys: one or two inline in `keys` (a decode step's store); more, when they are
    /// a run of the request's keys (which only grow while the request has jobs), as
    /// [first_key, first_key + num_keys) of them, nothing copied; otherwise a copy in `keys`.
    bool key_run = false;
    uint32_t first_key = 0;
    uint32_t num_keys = 0;
    absl::InlinedVector<block_key, 2> keys;
    /// Loads: the destinations, [first_block, end_block) of the request's block ids (kept from
    /// update_state_after_alloc until the load completes), reported invalid on failure.
    uint32_t first_block = 0;
    uint32_t end_block = 0;
    /// Loads: one of its blocks was in the engine's invalid_block_ids while it was in flight.
    bool engine_failed = false;
  };
  using job_map = absl::flat_hash_map<job_id, job_state>;
  std::span<const block_key> keys_of(const job_state& js) const {
    if (!js.key_run) return {js.keys.data(), js.keys.size()};
    return std::span<const block_key>(states_[js.slot].keys).subspan(js.first_key, js.num_keys);
  }
  /// Records the job's keys: one or two inline (a decode step's store: read back from the job's
  /// own entry at completion), more as the run [first, first + keys.size()) of the request's
  /// keys, or (first == npos: not a run) a copy.
  static void set_keys(job_state& js, std::span<const block_key> keys, uint64_t first) {
    if (first != npos && keys.size() > 2) {
      js.key_run = true;
      js.first_key = static_cast<uint32_t>(first);
      js.num_keys = static_cast<uint32_t>(keys.size());
    } else {
      js.keys.assign(keys.begin(), keys.end());
    }
  }
  /// Transparent std::string_view hashing (Debian's absl::string_view is its own type).
  struct id_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
      return absl::Hash<std::string_view>{}(s);
    }
  };
  struct id_eq {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
  };

  uint32_t find(std::string_view id) const {
    auto it = index_.find(id);
    return it == index_.end() ? npos : it->second;
  }
  uint32_t find_or_create(std::string_view id) {
    auto [it, fresh] = index_.try_emplace(id, npos);
    if (!fresh) return it->second;
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = static_cast<uint32_t>(states_.size());
      states_.emplace_back();
      next_cached_.push_back(npos);
    }
    it->second = slot;
    states_[slot].id.assign(id);
    return slot;
  }
  /// Forgets a request; its slot (and vector capacity) is reused by a later one.
  void release(uint32_t slot) {
    auto& st = states_[slot];
    index_.erase(std::string_view(st.id));
    st.cursor = st.local_computed = 0;
    next_cached_[slot] = npos;
    st.finished = st.delay_free = st.store_entry = st.owed = false;
    st.load_job.reset();
    st.keys.clear();
    st.slot_hints.clear();
    st.block_ids.clear();
    st.jobs.clear();
    st.id.clear();
    free_slots_.push_back(slot);
  }
  void extend_keys(request_state& st, std::span<const block_key> block_hashes) const {
    const size_t hf = geo_.hash_factor;
    // Multiply-compare first: this runs for every scheduled request every step, and a 64-bit
    // division costs more than the rest of the check.
    if (block_hashes.size() < (st.keys.size() + 1) * hf) return;
    const size_t want = block_hashes.size() / hf;
    st.keys.reserve(std::max(want, 2 * st.keys.size()));
    if (hf == 1) {  // one hash per offloaded block: a plain copy
      st.keys.insert(st.keys.end(), block_hashes.begin() + static_cast<ptrdiff_t>(st.keys.size()),
                     block_hashes.begin() + static_cast<ptrdiff_t>(want));
    } else {
      for (size_t i = st.keys.size(); i < want; ++i)
        st.keys.push_back(block_hashes[i * hf + hf - 1]);
    }
    st.slot_hints.resize(want, UINT32_MAX);
  }
  /// False when plan_stores(st, sr) would change nothing: extend_keys adds no key and the
  /// number of complete offloaded blocks is the cursor (the same checks, without the call).
  bool may_store(const request_state& st, const scheduled_request& sr) const noexcept {
    const uint64_t offloadable =
        std::min<uint64_t>(uint64_t{sr.num_computed} + sr.num_scheduled, sr.req.num_tokens);
    // One unsigned compare for "at least one block past the cursor, or below it" (wraps).
    const uint64_t past_cursor = offloadable - uint64_t{st.cursor} * geo_.offloaded_block_size;
    return sr.req.block_hashes.size() >= (st.keys.size() + 1) * geo_.hash_factor ||
           past_cursor >= geo_.offloaded_block_size;
  }
  /// R1's touch of all of a request's keys, with the slots it saw last time as hints.
  void touch_all(request_state& st) { manager_->touch_hinted(st.keys, st.slot_hints); }
  void plan_stores(uint32_t slot, const scheduled_request& sr, bool replace_blocks,
                   connector_metadata& meta);
  /// first_key: the request-key index of keys[0] when keys are a run of the request's keys,
  /// else npos.
  void emit_store_job(uint32_t slot, std::span<const block_key> keys,
                      std::span<const cpu_slot> slots, std::span<const gpu_block> gpu_ids,
                      uint32_t first_block, uint32_t first_key, connector_metadata& meta);
  /// Completes a job in flight with the manager (ok or not). `report`: record the request-level
  /// outcome (finished_recving, invalid blocks, finished_sending) for take_request_completions.
  /// `settled`: a load the engine's finished_recving completes (release_requests): it goes to
  /// finished_recving, its failed blocks do not go to invalid_block_ids.
  void complete_job(job_map::iterator jit, bool ok, bool report, std::string& rejected,
                    errc& first_error, bool settled = false);
  /// The job is over: drop it from its request, releasing a finished request's last job.
  void forget_job(uint32_t slot, job_id id, bool report);
  // --- the file tier (planner_tier.cpp) ---
  /// Asks the ledger about keys [from, end) of the request (the pool missed keys[from]); starts
  /// a promotion of the run of hits. True: answer nullopt (ask again).
  bool consult_tier(request_state& st, uint64_t from, uint64_t end);
  /// Offers the blocks of a store that completed ok for a cascade.
  void offer_cascade(std::span<const block_key> keys, std::string& rejected, errc& first_error);
  /// Records a tier job for the next metadata.
  void record_tier_job(transfer_kind kind, std::span<const block_key> keys,
                       std::span<const cpu_slot> slots);
  /// Completes a tier job in flight (result r); false when r.job is not one.
  bool complete_tier_job(const job_result& r, std::string& rejected, errc& first_error);
  /// The tier's part of build_connector_meta: check jobs, the recorded jobs, removed files.
  void emit_tier_jobs(connector_metadata& meta);

  void drop_owed(uint32_t slot) {
    states_[slot].owed = false;
    std::erase(owed_sending_, slot);
  }

  connector_geometry geo_;
  bool prefix_caching_;
  std::unique_ptr<offload_manager> manager_;
  absl::flat_hash_map<std::string, uint32_t, id_hash, id_eq> index_;
  std::vector<request_state> states_;
  std::vector<uint32_t> free_slots_;
  job_map jobs_;
  /// Load jobs recorded or in flight (their keys are pinned in the manager).
  size_t loads_in_flight_ = 0;
  std::vector<transfer_job> pending_loads_;  ///< recorded by update_state_after_alloc
  /// Finished delay_free requests with no job in flight, released (and reported in
  /// finished_sending) by the next update_connector_output with job results.
  std::vector<uint32_t> owed_sending_;
  request_completions completions_;
  std::vector<std::string> finished_since_meta_;  ///< request_finished ids for the next metadata
  connector_stats stats_;
  // the file tier (absent: none configured)
  std::optional<file_tier_ledger> tier_;
  struct tier_job_state {
    transfer_kind kind = transfer_kind::cascade;
    std::vector<block_key> keys;
  };
  absl::flat_hash_map<job_id, tier_job_state> tier_jobs_;  ///< recorded or in flight
  std::vector<tier_job> pending_tier_jobs_;                ///< for the next metadata
  absl::flat_hash_set<block_key, block_key_hash> promoting_;
  file_tier_counters tier_counters_;
  bool tier_events_ = false;  ///< keep the ledger's events for take_tier_events (else dropped)
  job_id next_job_ = 0;
  /// Jobs with a lower id went out with a metadata (the others are recorded for the next one).
  job_id sent_below_ = 0;
  /// Jobs with a lower id were in flight at the last reset: stale (their results do not reach
  /// the manager).
  job_id stale_below_ = 0;
  /// The stale jobs still in flight at the last reset, ascending, for the next metadata's flush.
  std::vector<job_id> reset_flush_;
  /// Jobs failed since the last metadata (a failure on one rank, or a deadline), in the order
  /// their results came, for the next metadata's flush: another rank may still be copying into
  /// or out of their slots, which the failure gave back to the pool.
  std::vector<job_id> failed_flush_;
  /// Loads settled by the engine's finished_recving (release_requests) whose result from the
  /// coordinator has not come yet, with the settled outcome: that result is dropped when it
  /// does.
  absl::flat_hash_map<job_id, bool> settled_;
  /// The results the last update_connector_output(connector_output) dropped as settled.
  std::vector<settled_result> settled_dropped_;
  /// The jobs the last update_connector_output(request_output) completed (completes_jobs).
  std::vector<job_id> engine_completed_;
  /// Set by the first releases_requests output: the engine's finished_recving alone releases a
  /// loading request (its workers name it, with a failed load's blocks: planner.hpp).
  bool engine_names_loads_ = false;
  /// Requests whose load the coordinator completed before the engine named them
  /// (engine_names_loads_): the engine's finished_recving, when it names them, is passed on.
  absl::flat_hash_set<std::string, id_hash, id_eq> awaiting_engine_;
  uint32_t first_cached_ = npos;       ///< the first running request of the last step (a hint)
  std::vector<uint32_t> next_cached_;  ///< by slot: the request after it in the last step
  size_t last_store_jobs_ = 0;         ///< store jobs of the last step (reserve hint)
  // scratch buffers reused across calls
  std::vector<block_key> scratch_keys_;
  std::vector<uint32_t> scratch_idx_;
  std::vector<gpu_block> scratch_gpu_;
  std::vector<uint32_t> scratch_slots_;
  std::vector<job_id> scratch_jobs_;
};

}  // namespace kvc::scheduler
