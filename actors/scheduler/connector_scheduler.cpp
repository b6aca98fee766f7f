#include "actors/scheduler/connector_scheduler.hpp"

#include <absl/container/flat_hash_map.h>
#include <absl/container/inlined_vector.h>
#include <absl/hash/hash.h>

#include <algorithm>
#include <string>
#include <utility>

namespace kvc::scheduler {

namespace {

std::string quoted(std::string_view s) {
  return "'" + std::string(s) + "'";
}

const char* kind_name(transfer_kind k) {
  return k == transfer_kind::load ? "load" : "store";
}

}  // namespace

/// The connector's state. Requests live in a dense array of slots (reused, with their vectors'
/// capacity, after a request is gone) found through a small id -> slot map, so the per-step
/// walk over running requests touches little memory; jobs refer to their request's slot (a
/// request's state outlives its jobs). Scratch buffers are reused across calls so that a steady
/// step allocates only for the jobs it emits.
class connector_scheduler::impl {
 public:
  impl(const connector_geometry& geo, bool prefix_caching, std::unique_ptr<offload_manager> manager)
      : geo_(geo), prefix_caching_(prefix_caching), manager_(std::move(manager)) {}

  match_result get_num_new_matched_tokens(const request_view& req, uint32_t num_computed);
  status update_state_after_alloc(const request_view& req, const block_table_view& blocks,
                                  uint32_t num_external);
  result<connector_metadata> build_connector_meta(const step_input& in);
  status update_connector_output(const connector_output& out);
  status update_connector_output(const request_output& out);
  bool request_finished(std::string_view req_id);

  static constexpr uint32_t npos = UINT32_MAX;

  /// Per-request state. The fields every decode step reads for every running request (the id
  /// check of the order prediction, the key count, the store cursor) share the first cache
  /// line; the rest is read when a block fills or a job ends.
  struct alignas(64) request_state {
    std::string id;
    std::vector<block_key> keys;  ///< one per full offloaded block so far
    uint32_t cursor = 0;          ///< next offloaded block index to consider for storing
    std::vector<gpu_block> block_ids;   ///< all GPU block ids of the request
    std::vector<cpu_slot> slot_hints;   ///< per key: its slot at the last touch (touch_hinted)
    std::vector<job_id> jobs;           ///< every job in flight, oldest first (for flush)
    std::optional<job_id> load_job;     ///< recorded or in flight
    uint32_t local_computed = 0;  ///< num_computed at the last get_num_new_matched_tokens
    bool finished = false;     ///< request_finished was called; kept for its jobs
    bool delay_free = false;   ///< request_finished returned true: owe finished_sending
    bool store_entry = false;  ///< a store job was planned (R1: in _reqs_being_stored)
    bool owed = false;         ///< in owed_sending_: finished, delay_free, nothing in flight
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
  void complete_job(job_map::iterator jit, bool ok, bool report, std::string& rejected,
                    errc& first_error);
  /// The job is over: drop it from its request, releasing a finished request's last job.
  void forget_job(uint32_t slot, job_id id, bool report);
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
  connector_stats stats_;
  job_id next_job_ = 0;
  uint32_t first_cached_ = npos;     ///< the first running request of the last step (a hint)
  std::vector<uint32_t> next_cached_;  ///< by slot: the request after it in the last step
  size_t last_store_jobs_ = 0;         ///< store jobs of the last step (reserve hint)
  // scratch buffers reused across calls
  std::vector<block_key> scratch_keys_;
  std::vector<uint32_t> scratch_idx_;
  std::vector<gpu_block> scratch_gpu_;
  std::vector<uint32_t> scratch_slots_;
  std::vector<job_id> scratch_jobs_;
};

// ---------------------------------------------------------------------------------------------
// connector_scheduler: construction and forwarding

result<std::unique_ptr<connector_scheduler>> connector_scheduler::create(
    const connector_config& cfg) {
  auto geo = make_geometry(cfg);
  if (!geo) return geo.error();
  auto mgr = offload_manager::create(cfg.manager);
  if (!mgr) return mgr.error();
  return std::unique_ptr<connector_scheduler>(new connector_scheduler(
      std::make_unique<impl>(*geo, cfg.enable_prefix_caching, std::move(*mgr))));
}

result<std::unique_ptr<connector_scheduler>> connector_scheduler::create(
    const connector_config& cfg, std::unique_ptr<offload_manager> manager) {
  auto geo = make_geometry(cfg);
  if (!geo) return geo.error();
  if (!manager) return make_error(errc::invalid_argument, "connector: no offload manager given");
  return std::unique_ptr<connector_scheduler>(new connector_scheduler(
      std::make_unique<impl>(*geo, cfg.enable_prefix_caching, std::move(manager))));
}

connector_scheduler::connector_scheduler(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
connector_scheduler::~connector_scheduler() = default;

match_result connector_scheduler::get_num_new_matched_tokens(const request_view& req,
                                                             uint32_t num_computed) {
  return impl_->get_num_new_matched_tokens(req, num_computed);
}
status connector_scheduler::update_state_after_alloc(const request_view& req,
                                                     const block_table_view& blocks,
                                                     uint32_t num_external) {
  return impl_->update_state_after_alloc(req, blocks, num_external);
}
status connector_scheduler::update_state_after_alloc(const request_view& req,
                                                     std::span<const gpu_block> block_ids,
                                                     uint32_t num_external) {
  return impl_->update_state_after_alloc(req, block_table_view{block_ids, {}}, num_external);
}
result<connector_metadata> connector_scheduler::build_connector_meta(const step_input& in) {
  return impl_->build_connector_meta(in);
}
status connector_scheduler::update_connector_output(const connector_output& out) {
  return impl_->update_connector_output(out);
}
status connector_scheduler::update_connector_output(const request_output& out) {
  return impl_->update_connector_output(out);
}
request_completions connector_scheduler::take_request_completions() {
  return std::exchange(impl_->completions_, request_completions{});
}
bool connector_scheduler::request_finished(std::string_view req_id) {
  return impl_->request_finished(req_id);
}
std::vector<kv_event> connector_scheduler::take_events() {
  return impl_->manager_->take_events();
}
const connector_stats& connector_scheduler::stats() const noexcept {
  return impl_->stats_;
}
const connector_geometry& connector_scheduler::geometry() const noexcept {
  return impl_->geo_;
}
bool connector_scheduler::load_in_flight(std::string_view req_id) const {
  const uint32_t slot = impl_->find(req_id);
  return slot != impl::npos && impl_->states_[slot].load_job.has_value();
}
size_t connector_scheduler::jobs_in_flight() const noexcept {
  return impl_->jobs_.size();
}
size_t connector_scheduler::tracked_requests() const noexcept {
  return impl_->index_.size();
}
std::span<const transfer_job> connector_scheduler::pending_loads() const noexcept {
  return impl_->pending_loads_;
}
std::span<const block_key> connector_scheduler::job_keys(job_id id) const {
  auto it = impl_->jobs_.find(id);
  if (it == impl_->jobs_.end()) return {};
  return impl_->keys_of(it->second);
}
const offload_manager& connector_scheduler::manager() const noexcept {
  return *impl_->manager_;
}

// ---------------------------------------------------------------------------------------------
// Lookups and loads

match_result connector_scheduler::impl::get_num_new_matched_tokens(const request_view& req,
                                                                   uint32_t num_computed) {
  auto& st = states_[find_or_create(req.id)];
  if (!st.load_job) st.block_ids.clear();  // a loading request keeps its load's destinations
  extend_keys(st, req.block_hashes);
  st.local_computed = num_computed;
  touch_all(st);

  const uint64_t obs = geo_.offloaded_block_size;
  const uint64_t computed = num_computed;
  const uint64_t nb = std::min<uint64_t>(req.num_tokens / obs, st.keys.size());
  if (nb * obs < computed + obs) return {0u, false};
  const uint64_t start = computed / obs;
  const uint64_t hits =
      manager_->lookup_prefix(std::span<const block_key>(st.keys).subspan(start, nb - start));
  stats_.lookups += std::min(hits + 1, nb - start);
  if (hits == 0) return {0u, false};
  const uint64_t max_hit = obs * (start + hits);
  if (max_hit < computed + obs) return {0u, false};
  // R1's `_blocks_being_loaded`: a hit block that a load of this connector reads (pinned in
  // the manager from prepare_load to complete_load, exactly the set's lifetime).
  if (prefix_caching_ && loads_in_flight_ > 0 &&
      manager_->any_loading(std::span<const block_key>(st.keys).subspan(start, hits))) {
    ++stats_.deferred;
    return {std::nullopt, false};
  }
  stats_.hit_blocks += hits;
  return {static_cast<uint32_t>(max_hit - computed), true};
}

status connector_scheduler::impl::update_state_after_alloc(const request_view& req,
                                                           const block_table_view& blocks,
                                                           uint32_t num_external) {
  if (num_external == 0) return {};
  const auto block_ids = blocks.ids;
  const uint32_t slot = find(req.id);
  request_state* st = slot == npos ? nullptr : &states_[slot];
  if (st == nullptr || st->finished)
    return make_error(errc::not_found, "update_state_after_alloc: unknown request " +
                                           quoted(req.id) +
                                           " (get_num_new_matched_tokens was not called)");
  if (st->load_job)
    return make_error(errc::precondition_failed, "update_state_after_alloc: request " +
                                                     quoted(req.id) +
                                                     " already has a load job in flight");
  extend_keys(*st, req.block_hashes);

  const uint64_t obs = geo_.offloaded_block_size;
  const uint64_t gpu_bs = geo_.gpu_block_size;
  const uint64_t cached = uint64_t{st->local_computed} + num_external;
  if (cached % obs != 0)
    return make_error(errc::invalid_argument,
                      "update_state_after_alloc: request " + quoted(req.id) +
                          ": computed + external = " + std::to_string(cached) +
                          " tokens is not a whole number of offloaded blocks of " +
                          std::to_string(obs));
  const uint64_t nb = cached / obs;
  if (nb > st->keys.size())
    return make_error(errc::invalid_argument,
                      "update_state_after_alloc: request " + quoted(req.id) + " has " +
                          std::to_string(st->keys.size()) + " offloaded block keys, " +
                          std::to_string(nb) + " needed for " + std::to_string(cached) + " tokens");
  const uint64_t ngpu = cached / gpu_bs;
  if (block_ids.size() < ngpu)
    return make_error(errc::invalid_argument,
                      "update_state_after_alloc: request " + quoted(req.id) + ": " +
                          std::to_string(block_ids.size()) + " GPU blocks for " +
                          std::to_string(cached) + " tokens (" + std::to_string(ngpu) + " needed)");
  if (!blocks.hashed.empty() && blocks.hashed.size() != block_ids.size())
    return make_error(errc::invalid_argument,
                      "update_state_after_alloc: request " + quoted(req.id) + ": " +
                          std::to_string(blocks.hashed.size()) + " hashed flags for " +
                          std::to_string(block_ids.size()) + " blocks");
  // The first block to fill: R1's first non-null block without a hash (without flags: the first
  // non-null one after the GPU-cached prefix). ngpu when there is none: an empty job.
  uint64_t first = 0;
  if (blocks.hashed.empty()) {
    first = st->local_computed / gpu_bs;
    while (first < ngpu && block_ids[first] == 0) ++first;
  } else {
    while (first < ngpu && (block_ids[first] == 0 || blocks.hashed[first] != 0)) ++first;
  }
  const uint64_t first_key = first < ngpu ? first / geo_.factor : nb;
  const auto keys = std::span<const block_key>(st->keys).subspan(first_key, nb - first_key);

  auto slots = manager_->prepare_load(keys);
  if (!slots)
    return make_error(slots.code(), "update_state_after_alloc: request " + quoted(req.id) +
                                        ": prepare_load failed: " + slots.error().message());

  const job_id id = next_job_++;
  transfer_job job;
  job.id = id;
  job.request_id = st->id;
  job.kind = transfer_kind::load;
  job.slots.assign(slots->begin(), slots->end());
  job.gpu_blocks.assign(block_ids.begin() + first, block_ids.begin() + ngpu);
  job.skip = first < ngpu ? static_cast<uint32_t>(first % geo_.factor) : 0;
  if (first < ngpu) {  // R1 describes an empty load with empty lists
    job.group_sizes = {static_cast<uint32_t>(ngpu - first)};
    job.block_indices = {static_cast<uint32_t>(first)};
  }

  job_state js;
  js.slot = slot;
  js.kind = transfer_kind::load;
  set_keys(js, keys, first_key);
  js.first_block = static_cast<uint32_t>(first);
  js.end_block = static_cast<uint32_t>(ngpu);
  st->block_ids.assign(block_ids.begin(), block_ids.end());
  ++loads_in_flight_;
  jobs_.emplace(id, std::move(js));
  pending_loads_.push_back(std::move(job));

  st->jobs.push_back(id);
  st->load_job = id;
  if (!req.do_remote_decode) st->cursor = static_cast<uint32_t>(nb);
  ++stats_.loads_planned;
  stats_.load_blocks += keys.size();
  return {};
}

// ---------------------------------------------------------------------------------------------
// Per-step metadata and stores

result<connector_metadata> connector_scheduler::impl::build_connector_meta(const step_input& in) {
  // Validate (and resolve) first so that an error changes nothing.
  scratch_slots_.clear();
  for (const auto& sr : in.new_requests) {
    const uint32_t slot = find(sr.req.id);
    if (slot != npos && states_[slot].finished)
      return make_error(errc::invalid_argument, "build_connector_meta: new request " +
                                                    quoted(sr.req.id) + " already finished");
    scratch_slots_.push_back(slot);
  }
  // Running requests come in the same order step after step: each one's slot is predicted as
  // the one that followed the previous request last step (next_cached_, a compact array, so
  // the guesses cost no state reads and every state line can be fetched at once), then checked
  // by its id, the map being the fallback. The links are only hints, rewritten as seen.
  const size_t fresh_count = scratch_slots_.size();
  uint32_t guess = first_cached_;
  scratch_slots_.resize(fresh_count + in.cached_requests.size());
  for (size_t i = 0; i < in.cached_requests.size(); ++i) {
    scratch_slots_[fresh_count + i] = guess;
    if (guess < states_.size()) {
      __builtin_prefetch(&states_[guess]);
      guess = next_cached_[guess];
    }
  }
  uint32_t prev = npos;
  for (size_t i = 0; i < in.cached_requests.size(); ++i) {
    const auto& sr = in.cached_requests[i];
    uint32_t& slot = scratch_slots_[fresh_count + i];
    // A wrong guess earlier in the chain makes the later ones follow from the right slot.
    const uint32_t g = prev == npos ? first_cached_ : next_cached_[prev];
    if (g != slot) slot = g;
    if (!(slot < states_.size() && states_[slot].id == sr.req.id)) slot = find(sr.req.id);
    if (slot == npos || states_[slot].finished)
      return make_error(errc::not_found, "build_connector_meta: scheduled request " +
                                             quoted(sr.req.id) + " is unknown or finished");
    (prev == npos ? first_cached_ : next_cached_[prev]) = slot;
    prev = slot;
  }

  connector_metadata meta;
  meta.step = in.step;
  meta.loads.swap(pending_loads_);
  pending_loads_.reserve(meta.loads.capacity());  // the next step's loads: no regrowth
  meta.stores.reserve(last_store_jobs_ + 4);      // about as many as last step: no regrowth
  size_t i = 0;
  for (const auto& sr : in.new_requests) {
    const uint32_t slot = scratch_slots_[i++];
    plan_stores(slot != npos ? slot : find_or_create(sr.req.id), sr, /*replace_blocks=*/true, meta);
  }
  for (const auto& sr : in.cached_requests) {
    const uint32_t slot = scratch_slots_[i++];
    // Most decode steps of a request fill no block: skip plan_stores when it would only find
    // that out (no new block ids, no new key, no block beyond the cursor to offload).
    if (!sr.resumed && sr.block_ids.empty() && !may_store(states_[slot], sr)) continue;
    plan_stores(slot, sr, sr.resumed, meta);
  }
  last_store_jobs_ = meta.stores.size();
  for (const auto& id : in.preempted) {
    meta.flush_requests.emplace_back(id);
    const uint32_t slot = find(id);
    if (slot == npos) continue;
    const auto& jobs = states_[slot].jobs;
    meta.flush.insert(meta.flush.end(), jobs.begin(), jobs.end());
  }
  return meta;
}

void connector_scheduler::impl::plan_stores(uint32_t slot, const scheduled_request& sr,
                                            bool replace_blocks, connector_metadata& meta) {
  auto& st = states_[slot];
  extend_keys(st, sr.req.block_hashes);
  if (replace_blocks)
    st.block_ids.assign(sr.block_ids.begin(), sr.block_ids.end());
  else if (!sr.block_ids.empty())
    st.block_ids.insert(st.block_ids.end(), sr.block_ids.begin(), sr.block_ids.end());

  const uint64_t f = geo_.factor;
  const uint64_t obs = geo_.offloaded_block_size;
  const uint64_t offloadable =
      std::min<uint64_t>(uint64_t{sr.num_computed} + sr.num_scheduled, sr.req.num_tokens);
  // Usually the complete blocks end at the cursor: decide that without dividing (see
  // extend_keys).
  const uint64_t cursor = st.cursor;
  if (offloadable - cursor * obs < obs && st.keys.size() >= cursor &&
      st.block_ids.size() >= cursor * f)
    return;  // (the subtraction wraps when offloadable is below the cursor)
  const uint64_t nb =
      std::min<uint64_t>({offloadable / obs, st.keys.size(), st.block_ids.size() / f});
  if (nb <= cursor) {
    // R1 sets the cursor from what is computable now: after a preemption the recomputed prefix
    // may be shorter, and its blocks are offered again as they are recomputed.
    st.cursor = static_cast<uint32_t>(nb);
    return;
  }

  // Candidates: blocks whose last GPU block is not the null block, and whose null GPU blocks
  // (sliding window) form a leading run, the only shape a job's `skip` can express.
  scratch_keys_.clear();
  scratch_idx_.clear();
  for (uint64_t idx = st.cursor; idx < nb; ++idx) {
    const gpu_block* ids = st.block_ids.data() + idx * f;
    if (ids[f - 1] == 0) continue;
    uint64_t j = 0;
    while (j < f && ids[j] == 0) ++j;
    while (j < f && ids[j] != 0) ++j;
    if (j != f) continue;
    scratch_keys_.push_back(st.keys[idx]);
    scratch_idx_.push_back(static_cast<uint32_t>(idx));
  }
  if (scratch_keys_.empty()) {
    st.cursor = static_cast<uint32_t>(nb);
    return;
  }
  const auto plan = manager_->prepare_store(scratch_keys_);
  if (!plan) {
    ++stats_.store_retries;  // no room now: the cursor stays, retried next step
    return;
  }
  st.cursor = static_cast<uint32_t>(nb);
  if (plan->keys.empty()) return;

  // plan's spans live until the next manager call: build the jobs first, then touch. The stored
  // keys are a subsequence of the candidates; a stored block with leading nulls other than the
  // first starts a new job (normally there is exactly one job).
  scratch_gpu_.clear();
  size_t c = 0;
  size_t job_begin = 0;
  uint32_t first_block = 0;  // block-table index of the job's first GPU block
  uint32_t first_key = 0;    // request-key index of the job's first key, npos: not a run
  uint32_t next_key = 0;
  for (size_t j = 0; j < plan->keys.size(); ++j) {
    while (c < scratch_keys_.size() && scratch_keys_[c] != plan->keys[j]) ++c;
    if (c == scratch_keys_.size()) break;  // not a candidate: the manager broke its contract
    const uint32_t idx = scratch_idx_[c];
    const uint64_t block = uint64_t{idx} * f;
    const gpu_block* ids = st.block_ids.data() + block;
    st.slot_hints[idx] = plan->slots[j];  // the touch below finds it there
    ++c;
    uint32_t lead = 0;
    while (ids[lead] == 0) ++lead;
    if (lead > 0 && j > job_begin) {
      emit_store_job(slot, plan->keys.subspan(job_begin, j - job_begin),
                     plan->slots.subspan(job_begin, j - job_begin), scratch_gpu_, first_block,
                     first_key, meta);
      scratch_gpu_.clear();
      job_begin = j;
    }
    if (j == job_begin) {
      first_block = static_cast<uint32_t>(block + lead);
      first_key = idx;
    } else if (idx != next_key) {
      first_key = npos;
    }
    next_key = idx + 1;
    scratch_gpu_.insert(scratch_gpu_.end(), ids + lead, ids + f);
  }
  emit_store_job(slot, plan->keys.subspan(job_begin), plan->slots.subspan(job_begin), scratch_gpu_,
                 first_block, first_key, meta);
  touch_all(st);
}

void connector_scheduler::impl::emit_store_job(uint32_t slot, std::span<const block_key> keys,
                                               std::span<const cpu_slot> slots,
                                               std::span<const gpu_block> gpu_ids,
                                               uint32_t first_block, uint32_t first_key,
                                               connector_metadata& meta) {
  auto& st = states_[slot];
  const job_id id = next_job_++;
  transfer_job job;
  job.id = id;
  job.request_id = st.id;
  job.kind = transfer_kind::store;
  job.slots.assign(slots.begin(), slots.end());
  job.gpu_blocks.assign(gpu_ids.begin(), gpu_ids.end());
  job.skip = first_block % geo_.factor;
  job.group_sizes = {static_cast<uint32_t>(gpu_ids.size())};
  job.block_indices = {first_block};

  job_state js;
  js.slot = slot;
  js.kind = transfer_kind::store;
  set_keys(js, keys, first_key);
  jobs_.emplace(id, std::move(js));
  meta.stores.push_back(std::move(job));

  st.jobs.push_back(id);
  st.store_entry = true;
  ++stats_.stores_planned;
  stats_.store_blocks += keys.size();
}

// ---------------------------------------------------------------------------------------------
// Completions

status connector_scheduler::impl::update_connector_output(const connector_output& out) {
  errc first_error = errc::ok;
  std::string rejected;
  // One allocation for this output's finished_recving (the vector starts empty each step).
  const auto loads = std::count_if(out.jobs.begin(), out.jobs.end(), [](const job_result& r) {
    return r.kind == transfer_kind::load;
  });
  if (loads > 0)
    completions_.finished_recving.reserve(completions_.finished_recving.size() + loads);
  for (const auto& r : out.jobs) {
    auto jit = jobs_.find(r.job);
    if (jit == jobs_.end()) {
      if (first_error == errc::ok) first_error = errc::not_found;
      if (!rejected.empty()) rejected += "; ";
      rejected += "job " + std::to_string(r.job) + " unknown or already completed";
      ++stats_.rejected_results;
      continue;
    }
    if (jit->second.kind != r.kind) {
      if (first_error == errc::ok) first_error = errc::invalid_argument;
      if (!rejected.empty()) rejected += "; ";
      rejected += "job " + std::to_string(r.job) + " is a " + kind_name(jit->second.kind) +
                  ", the result says " + kind_name(r.kind);
      ++stats_.rejected_results;
      continue;
    }
    complete_job(jit, r.ok, /*report=*/true, rejected, first_error);
  }
  // Finished requests that owe finished_sending with nothing in flight (R1's worker reports
  // them on its next get_finished).
  completions_.finished_sending.reserve(completions_.finished_sending.size() +
                                        owed_sending_.size());
  for (uint32_t slot : owed_sending_) {
    completions_.finished_sending.push_back(states_[slot].id);
    states_[slot].owed = false;
    release(slot);
  }
  owed_sending_.clear();
  if (first_error == errc::ok) return {};
  return make_error(first_error, "update_connector_output (step " + std::to_string(out.step) +
                                     "): rejected: " + rejected);
}

status connector_scheduler::impl::update_connector_output(const request_output& out) {
  errc first_error = errc::ok;
  std::string rejected;
  for (std::string_view id : out.finished_sending) {
    uint32_t slot = find(id);
    if (slot == npos) continue;
    auto& st = states_[slot];
    st.store_entry = false;  // R1 pops the request from _reqs_being_stored
    if (st.owed) drop_owed(slot);
    scratch_jobs_.clear();
    for (job_id j : st.jobs) {
      if (jobs_.find(j)->second.kind == transfer_kind::store) scratch_jobs_.push_back(j);
    }
    // The last job of a finished request releases it; otherwise release it here.
    for (job_id j : scratch_jobs_)
      complete_job(jobs_.find(j), true, /*report=*/false, rejected, first_error);
    slot = find(id);
    if (slot != npos && states_[slot].finished && states_[slot].jobs.empty()) release(slot);
  }
  for (std::string_view id : out.finished_recving) {
    const uint32_t slot = find(id);
    if (slot == npos || !states_[slot].load_job) continue;
    complete_job(jobs_.find(*states_[slot].load_job), true, /*report=*/false, rejected,
                 first_error);
  }
  if (first_error == errc::ok) return {};
  return make_error(first_error, "update_connector_output: " + rejected);
}

void connector_scheduler::impl::complete_job(job_map::iterator jit, bool ok, bool report,
                                             std::string& rejected, errc& first_error) {
  const job_id id = jit->first;
  job_state js = std::move(jit->second);
  jobs_.erase(jit);
  auto& st = states_[js.slot];
  if (js.kind == transfer_kind::store) {
    manager_->complete_store(keys_of(js), ok);
    ++(ok ? stats_.stores_ok : stats_.stores_failed);
  } else {
    // The keys were pinned by this job's prepare_load, so unpinning cannot fail unless the
    // manager broke its contract; report that rather than hide it.
    if (auto s = manager_->complete_load(keys_of(js)); !s.ok()) {
      if (first_error == errc::ok) first_error = errc::internal;
      if (!rejected.empty()) rejected += "; ";
      rejected += "job " + std::to_string(id) + ": complete_load failed: " + s.message();
      ++stats_.rejected_results;
    }
    --loads_in_flight_;
    ++(ok ? stats_.loads_ok : stats_.loads_failed);
    if (report) {
      if (!ok) {
        const auto end = std::min<size_t>(js.end_block, st.block_ids.size());
        for (size_t b = js.first_block; b < end; ++b) {
          if (st.block_ids[b] != 0) completions_.invalid_block_ids.push_back(st.block_ids[b]);
        }
      }
      completions_.finished_recving.push_back(st.id);
    }
    st.load_job.reset();
  }
  forget_job(js.slot, id, report);
}

void connector_scheduler::impl::forget_job(uint32_t slot, job_id id, bool report) {
  auto& st = states_[slot];
  if (auto pos = std::find(st.jobs.begin(), st.jobs.end(), id); pos != st.jobs.end())
    st.jobs.erase(pos);
  if (st.finished && st.jobs.empty()) {
    if (st.delay_free && report) completions_.finished_sending.push_back(st.id);
    release(slot);
  }
}

bool connector_scheduler::impl::request_finished(std::string_view req_id) {
  const uint32_t slot = find(req_id);
  if (slot == npos || states_[slot].finished) return false;
  auto& st = states_[slot];
  // R1: delay iff the request has an entry in _reqs_being_stored, i.e. a store was ever planned
  // for it (a preemption flush empties the entry but keeps it).
  const bool delay_free = st.store_entry;
  if (st.jobs.empty() && !delay_free) {
    release(slot);
    return false;
  }
  st.finished = true;
  st.delay_free = delay_free;
  if (st.jobs.empty()) {
    st.owed = true;
    owed_sending_.push_back(slot);
  }
  return delay_free;
}

}  // namespace kvc::scheduler
