#include "actors/scheduler/planner.hpp"

#include "actors/scheduler/planner_impl.hpp"

namespace kvc::scheduler {

using planner_detail::quoted;

// ---------------------------------------------------------------------------------------------
// planner: construction and forwarding

result<std::unique_ptr<planner>> planner::create(const planner_config& cfg) {
  auto mgr = offload_manager::create(cfg.manager);
  if (!mgr) return mgr.error();
  return create(cfg, std::move(*mgr));
}

result<std::unique_ptr<planner>> planner::create(const planner_config& cfg,
                                                 std::unique_ptr<offload_manager> manager) {
  auto geo = make_geometry(cfg);
  if (!geo) return geo.error();
  if (!manager) return make_error(errc::invalid_argument, "connector: no offload manager given");
  std::optional<file_tier_ledger> tier;
  if (cfg.file_tier) {
    auto ledger = file_tier_ledger::create(*cfg.file_tier);
    if (!ledger) return ledger.error();
    tier.emplace(std::move(*ledger));
  }
  return std::unique_ptr<planner>(new planner(std::make_unique<impl>(
      *geo, cfg.enable_prefix_caching, std::move(manager), std::move(tier),
      cfg.manager.enable_events)));
}

planner::planner(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
planner::~planner() = default;

match_result planner::get_num_new_matched_tokens(const request_view& req, uint32_t num_computed) {
  return impl_->get_num_new_matched_tokens(req, num_computed);
}
status planner::update_state_after_alloc(const request_view& req, const block_table_view& blocks,
                                         uint32_t num_external) {
  return impl_->update_state_after_alloc(req, blocks, num_external);
}
status planner::update_state_after_alloc(const request_view& req,
                                         std::span<const gpu_block> block_ids,
                                         uint32_t num_external) {
  return impl_->update_state_after_alloc(req, block_table_view{block_ids, {}}, num_external);
}
result<connector_metadata> planner::build_connector_meta(const step_input& in) {
  return impl_->build_connector_meta(in);
}
status planner::update_connector_output(const connector_output& out) {
  return impl_->update_connector_output(out);
}
status planner::update_connector_output(const request_output& out) {
  return impl_->update_connector_output(out);
}
request_completions planner::take_request_completions() {
  return std::exchange(impl_->completions_, request_completions{});
}
bool planner::request_finished(std::string_view req_id) {
  return impl_->request_finished(req_id);
}
std::vector<kv_event> planner::take_events() {
  return impl_->manager_->take_events();
}
bool planner::has_file_tier() const noexcept {
  return impl_->tier_.has_value();
}
void planner::adopt_tier_blocks(std::span<const block_key> oldest_first) {
  if (impl_->tier_) impl_->tier_->adopt(oldest_first);
}
std::vector<kv_event> planner::take_all_events() {
  auto evs = take_events();
  auto tier = take_tier_events();
  evs.insert(evs.end(), std::make_move_iterator(tier.begin()), std::make_move_iterator(tier.end()));
  return evs;
}
std::vector<kv_event> planner::take_tier_events() {
  return impl_->tier_ ? impl_->tier_->take_events() : std::vector<kv_event>{};
}
file_tier_counters planner::tier_counters() const {
  file_tier_counters c = impl_->tier_counters_;
  if (impl_->tier_) c.ledger = impl_->tier_->stats();
  return c;
}
const file_tier_ledger* planner::tier() const noexcept {
  return impl_->tier_ ? &*impl_->tier_ : nullptr;
}
const connector_stats& planner::stats() const noexcept {
  return impl_->stats_;
}
const connector_geometry& planner::geometry() const noexcept {
  return impl_->geo_;
}
bool planner::settled(job_id job) const {
  return impl_->settled_.contains(job);
}
std::span<const settled_result> planner::settled_results_dropped() const noexcept {
  return impl_->settled_dropped_;
}
std::span<const job_id> planner::jobs_completed_by_engine() const noexcept {
  return impl_->engine_completed_;
}
bool planner::load_in_flight(std::string_view req_id) const {
  const uint32_t slot = impl_->find(req_id);
  return slot != impl::npos && impl_->states_[slot].load_job.has_value();
}
size_t planner::jobs_in_flight() const noexcept {
  return impl_->jobs_.size() + impl_->tier_jobs_.size();
}
size_t planner::tracked_requests() const noexcept {
  return impl_->index_.size();
}
status planner::reset() {
  return impl_->reset();
}
planner_tables planner::tables() const noexcept {
  const impl& m = *impl_;
  const request_completions& c = m.completions_;
  return {.requests = m.index_.size(),
          .request_slots = m.states_.size() - m.free_slots_.size(),
          .jobs = m.jobs_.size(),
          .loads = m.loads_in_flight_,
          .pending_loads = m.pending_loads_.size(),
          .owed_sending = m.owed_sending_.size(),
          .completions =
              c.finished_sending.size() + c.finished_recving.size() + c.invalid_block_ids.size(),
          .finished_for_meta = m.finished_since_meta_.size(),
          .reset_flush = m.reset_flush_.size(),
          .failed_flush = m.failed_flush_.size(),
          .tier_jobs = m.tier_jobs_.size(),
          .promoting = m.promoting_.size(),
          .settled = m.settled_.size(),
          .awaiting_engine = m.awaiting_engine_.size()};
}
std::span<const transfer_job> planner::pending_loads() const noexcept {
  return impl_->pending_loads_;
}
std::span<const block_key> planner::job_keys(job_id id) const {
  auto it = impl_->jobs_.find(id);
  if (it == impl_->jobs_.end()) return {};
  return impl_->keys_of(it->second);
}
const offload_manager& planner::manager() const noexcept {
  return *impl_->manager_;
}

// ---------------------------------------------------------------------------------------------
// Lookups and loads

match_result planner::impl::get_num_new_matched_tokens(const request_view& req,
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
  if (tier_ && start + hits < nb && consult_tier(st, start + hits, nb)) {
    ++tier_counters_.asked_again;
    return {std::nullopt, false};
  }
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

status planner::impl::update_state_after_alloc(const request_view& req,
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

status planner::impl::reset() {
  if (tier_) {
    return make_error(errc::precondition_failed,
                      "reset: a file tier is configured; its files would outlive the reset "
                      "(reset_cache with a file tier is not supported)");
  }
  if (!pending_loads_.empty()) {
    return make_error(errc::precondition_failed,
                      "reset: " + std::to_string(pending_loads_.size()) +
                          " load(s) recorded for the next build_connector_meta; reset only "
                          "between steps");
  }
  // Every job in flight is flushed by the workers in the next step, before that step's or any
  // later job can write one of the slots the reset frees (handle_preemptions), and its result
  // is kept away from the manager by the threshold.
  stale_below_ = next_job_;
  for (const auto& [id, js] : jobs_) reset_flush_.push_back(id);
  std::sort(reset_flush_.begin(), reset_flush_.end());
  reset_flush_.erase(std::unique(reset_flush_.begin(), reset_flush_.end()), reset_flush_.end());
  for (request_state& st : states_) {
    st.cursor = 0;  // store again from the first block (vLLM main resets next_stored_chunk_idx)
    std::fill(st.slot_hints.begin(), st.slot_hints.end(), npos);
  }
  manager_->reset();
  ++stats_.resets;
  return {};
}

bool planner::impl::request_finished(std::string_view req_id) {
  finished_since_meta_.emplace_back(req_id);
  if (tier_) tier_->request_finished(req_id);  // told to the workers with the next metadata
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
