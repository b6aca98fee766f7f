// The planner's per-step work: build_connector_meta (loads, stores, flushes), store planning,
// and the completion of jobs from the aggregated outputs (planner_impl.hpp).
#include "actors/scheduler/planner_impl.hpp"

#include <algorithm>

// GCC 12 reports absl::InlinedVector's allocated-storage fields of a job's inline keys as maybe
// uninitialized once emit_store_job inlines their construction: a false positive (the
// inlined-storage path never reads them).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace kvc::scheduler {

using planner_detail::quoted;

result<connector_metadata> planner::impl::build_connector_meta(const step_input& in) {
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
  if (tier_) emit_tier_jobs(meta);
  meta.finished_requests = std::exchange(finished_since_meta_, {});
  // After a reset: first every job that was in flight then (each listed once); then the jobs
  // that failed since the last metadata (a stale one is listed already); then the preempted
  // requests' other jobs. `failed` names every failed one.
  const bool after_reset = !reset_flush_.empty();
  if (after_reset) meta.flush.swap(reset_flush_);
  const auto stale_end = meta.flush.end() - meta.flush.begin();  // ascending
  for (job_id j : failed_flush_) {
    if (!std::binary_search(meta.flush.begin(), meta.flush.begin() + stale_end, j))
      meta.flush.push_back(j);
  }
  meta.failed.swap(failed_flush_);
  for (const auto& id : in.preempted) {
    meta.flush_requests.emplace_back(id);
    const uint32_t slot = find(id);
    if (slot == npos) continue;
    for (job_id j : states_[slot].jobs) {
      if (!after_reset || j >= stale_below_) meta.flush.push_back(j);
    }
  }
  sent_below_ = next_job_;
  return meta;
}

void planner::impl::plan_stores(uint32_t slot, const scheduled_request& sr, bool replace_blocks,
                                connector_metadata& meta) {
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
  if (tier_) tier_->on_pool_evicted(plan->evicted);
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

void planner::impl::emit_store_job(uint32_t slot, std::span<const block_key> keys,
                                   std::span<const cpu_slot> slots,
                                   std::span<const gpu_block> gpu_ids, uint32_t first_block,
                                   uint32_t first_key, connector_metadata& meta) {
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

status planner::impl::update_connector_output(const connector_output& out) {
  settled_dropped_.clear();
  errc first_error = errc::ok;
  std::string rejected;
  // One allocation for this output's finished_recving (the vector starts empty each step).
  const auto loads = std::count_if(out.jobs.begin(), out.jobs.end(), [](const job_result& r) {
    return r.kind == transfer_kind::load;
  });
  if (loads > 0)
    completions_.finished_recving.reserve(completions_.finished_recving.size() + loads);
  for (const auto& r : out.jobs) {
    if (tier_ && complete_tier_job(r, rejected, first_error)) continue;
    if (!settled_.empty()) {
      if (auto it = settled_.find(r.job); it != settled_.end()) {
        settled_dropped_.push_back({r.job, it->second});
        settled_.erase(it);
        ++stats_.settled_results;  // the engine's sets completed it already
        continue;
      }
    }
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
      rejected += "job " + std::to_string(r.job) + " is a " + std::string{to_string(jit->second.kind)} +
                  ", the result says " + std::string{to_string(r.kind)};
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

status planner::impl::update_connector_output(const request_output& out) {
  engine_completed_.clear();
  if (out.role == request_output_role::releases_requests) return release_requests(out);
  // The engine's word: its sets reach it as given, whatever they complete here.
  completions_.finished_sending.insert(completions_.finished_sending.end(),
                                       out.finished_sending.begin(), out.finished_sending.end());
  completions_.finished_recving.insert(completions_.finished_recving.end(),
                                       out.finished_recving.begin(), out.finished_recving.end());
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
    engine_completed_.insert(engine_completed_.end(), scratch_jobs_.begin(), scratch_jobs_.end());
    for (job_id j : scratch_jobs_)
      complete_job(jobs_.find(j), true, /*report=*/false, rejected, first_error);
    slot = find(id);
    if (slot != npos && states_[slot].finished && states_[slot].jobs.empty()) release(slot);
  }
  for (std::string_view id : out.finished_recving) {
    const uint32_t slot = find(id);
    if (slot == npos || !states_[slot].load_job) continue;
    engine_completed_.push_back(*states_[slot].load_job);
    complete_job(jobs_.find(*states_[slot].load_job), true, /*report=*/false, rejected,
                 first_error);
  }
  if (first_error == errc::ok) return {};
  return make_error(first_error, "update_connector_output: " + rejected);
}

status planner::impl::release_requests(const request_output& out) {
  engine_names_loads_ = true;
  for (std::string_view id : out.finished_sending) {
    const uint32_t slot = find(id);
    if (slot == npos) continue;  // released: reported when its last job completed
    auto& st = states_[slot];
    if (!st.finished || !st.delay_free) continue;  // reported already, or nothing held for it
    completions_.finished_sending.push_back(st.id);
    st.delay_free = false;  // its jobs complete later without a second report
    st.store_entry = false;
    if (st.owed) drop_owed(slot);
    if (st.jobs.empty()) release(slot);
  }
  if (!out.invalid_block_ids.empty()) note_engine_failures(out.invalid_block_ids);
  std::string rejected;  // complete_job's: a manager breaking its contract
  errc first_error = errc::ok;
  for (std::string_view id : out.finished_recving) {
    if (!awaiting_engine_.empty()) {
      if (auto it = awaiting_engine_.find(id); it != awaiting_engine_.end()) {
        // Completed by the coordinator first: the engine's word releases it now (its workers
        // named the failed load's blocks in this output or an earlier one).
        completions_.finished_recving.push_back(*it);
        awaiting_engine_.erase(it);
        continue;
      }
    }
    const uint32_t slot = find(id);
    if (slot == npos || !states_[slot].load_job) continue;  // reported already, or no load
    const job_id job = *states_[slot].load_job;
    if (job >= sent_below_) continue;  // recorded, not sent yet: no worker has it
    auto jit = jobs_.find(job);
    const bool ok = !jit->second.engine_failed;
    settled_.emplace(job, ok);
    ++stats_.loads_settled;
    complete_job(jit, ok, /*report=*/true, rejected, first_error, /*settled=*/true);
  }
  return first_error == errc::ok ? status{}
                                 : make_error(first_error, "update_connector_output: " + rejected);
}

void planner::impl::note_engine_failures(std::span<const gpu_block> invalid) {
  scratch_gpu_.assign(invalid.begin(), invalid.end());
  std::sort(scratch_gpu_.begin(), scratch_gpu_.end());
  for (auto& [id, js] : jobs_) {
    if (js.kind != transfer_kind::load || js.engine_failed || id >= sent_below_) continue;
    const auto& blocks = states_[js.slot].block_ids;
    const size_t end = std::min<size_t>(js.end_block, blocks.size());
    for (size_t b = js.first_block; b < end && !js.engine_failed; ++b) {
      js.engine_failed =
          blocks[b] != 0 && std::binary_search(scratch_gpu_.begin(), scratch_gpu_.end(), blocks[b]);
    }
  }
}

void planner::impl::complete_job(job_map::iterator jit, bool ok, bool report, std::string& rejected,
                                 errc& first_error, bool settled) {
  const job_id id = jit->first;
  job_state js = std::move(jit->second);
  jobs_.erase(jit);
  auto& st = states_[js.slot];
  // A job in flight at a reset: the manager forgot its keys (their slots may hold other blocks
  // now), so only the request-level outcome remains.
  const bool stale = id < stale_below_;
  if (stale) ++stats_.stale_results;
  // A stale job that fails before the reset's flush went out is named failed with it; one that
  // fails later was flushed already (every rank ended its I/O of it then).
  if (!ok && (!stale || !reset_flush_.empty())) failed_flush_.push_back(id);
  if (js.kind == transfer_kind::store) {
    if (!stale) {
      manager_->complete_store(keys_of(js), ok);
      ++(ok ? stats_.stores_ok : stats_.stores_failed);
      if (tier_ && ok) offer_cascade(keys_of(js), rejected, first_error);
    }
  } else {
    if (!stale) {
      // The keys were pinned by this job's prepare_load, so unpinning cannot fail unless the
      // manager broke its contract; report that rather than hide it.
      if (auto s = manager_->complete_load(keys_of(js)); !s.ok()) {
        if (first_error == errc::ok) first_error = errc::internal;
        if (!rejected.empty()) rejected += "; ";
        rejected += "job " + std::to_string(id) + ": complete_load failed: " + s.message();
        ++stats_.rejected_results;
      }
      ++(ok ? stats_.loads_ok : stats_.loads_failed);
    }
    --loads_in_flight_;
    if (report && engine_names_loads_ && !settled) {
      // The engine has not named the request: it will, once every worker did (a worker names a
      // load failed elsewhere when the flush reaches it, with its blocks as load errors), and
      // only then may the request run. Its blocks are not reported here: vLLM reads a
      // connector's invalid blocks before update_connector_output, never after it.
      awaiting_engine_.insert(st.id);
    } else if (report) {
      // A settled load's failed blocks are the engine's own: it knows them already.
      if (!ok && !settled) {
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

void planner::impl::forget_job(uint32_t slot, job_id id, bool report) {
  auto& st = states_[slot];
  if (auto pos = std::find(st.jobs.begin(), st.jobs.end(), id); pos != st.jobs.end())
    st.jobs.erase(pos);
  if (st.finished && st.jobs.empty()) {
    if (st.delay_free && report) completions_.finished_sending.push_back(st.id);
    release(slot);
  }
}

}  // namespace kvc::scheduler
