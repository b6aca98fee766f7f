// The planner's file tier: lookups that consult the ledger, promotions, cascades, file checks
// and their completion (planner.hpp, "File tier"; planner_impl.hpp).
#include "actors/scheduler/planner_impl.hpp"

namespace kvc::scheduler {

using planner_detail::reject;

bool planner::impl::consult_tier(request_state& st, uint64_t from, uint64_t end) {
  // The run of hits right after the pool's prefix is promoted. Past a key that must be asked
  // again the scan goes on to the first miss, so that every file to check is queued at once
  // (one round trip to the disk, not one per block); hits there wait for the next lookup.
  scratch_keys_.clear();
  bool again = false;
  for (uint64_t i = from; i < end; ++i) {
    const block_key& k = st.keys[i];
    if (promoting_.contains(k)) {  // its pool slot is being filled: a pool hit soon
      again = true;
      continue;
    }
    const tier_lookup l = tier_->lookup(k, st.id);
    if (l == tier_lookup::miss) break;
    if (l == tier_lookup::ask_again) again = true;
    if (l == tier_lookup::hit && !again) scratch_keys_.push_back(k);
  }
  if (scratch_keys_.empty()) return again;
  const auto plan = manager_->prepare_store(scratch_keys_);
  if (!plan) {
    tier_counters_.promotions_no_room += scratch_keys_.size();
    return again;  // no room in the pool: the tier's hits are misses for now
  }
  tier_->on_pool_evicted(plan->evicted);
  if (plan->keys.empty()) return again;  // the reuse filter left them all out
  for (const block_key& k : plan->keys) {
    // A lookup hit is a ready block: this cannot fail unless the ledger broke its contract,
    // and then the slot is still filled and completed like any other.
    (void)tier_->begin_promotion(k);
    promoting_.insert(k);
  }
  tier_counters_.promoted_blocks += plan->keys.size();
  ++tier_counters_.promotion_jobs;
  record_tier_job(transfer_kind::promotion, plan->keys, plan->slots);
  return true;
}

void planner::impl::offer_cascade(std::span<const block_key> keys, std::string& rejected,
                                  errc& first_error) {
  const auto accepted = tier_->offer_cascade(keys);
  if (accepted.empty()) return;
  std::vector<block_key> cascade(accepted.begin(), accepted.end());
  const auto slots = manager_->prepare_load(cascade);  // pinned until the cascade ends
  if (!slots) {  // the store just completed these keys: only a broken manager refuses them
    for (const block_key& k : cascade) (void)tier_->complete_cascade(k, false);
    reject(rejected, first_error, errc::internal,
           "cascade: the pool refused to pin stored blocks: " + slots.error().message());
    return;
  }
  ++tier_counters_.cascade_jobs;
  tier_counters_.cascaded_blocks += cascade.size();
  record_tier_job(transfer_kind::cascade, cascade, *slots);
}

void planner::impl::record_tier_job(transfer_kind kind, std::span<const block_key> keys,
                                    std::span<const cpu_slot> slots) {
  const job_id id = next_job_++;
  tier_job job;
  job.id = id;
  job.kind = kind;
  job.slots.assign(slots.begin(), slots.end());
  job.keys.assign(keys.begin(), keys.end());
  tier_jobs_.emplace(id, tier_job_state{kind, job.keys});
  pending_tier_jobs_.push_back(std::move(job));
}

void planner::impl::emit_tier_jobs(connector_metadata& meta) {
  for (const block_key& k : tier_->take_lookup_batch()) {
    ++tier_counters_.check_jobs;
    record_tier_job(transfer_kind::check, std::span<const block_key>(&k, 1), {});
  }
  meta.tier_jobs.swap(pending_tier_jobs_);
  meta.tier_removed = tier_->take_removed();
  if (!tier_events_) (void)tier_->take_events();  // nobody takes them: keep memory flat
}

bool planner::impl::complete_tier_job(const job_result& r, std::string& rejected,
                                      errc& first_error) {
  const auto it = tier_jobs_.find(r.job);
  if (it == tier_jobs_.end()) return false;
  if (it->second.kind != r.kind) {
    reject(rejected, first_error, errc::invalid_argument,
           "job " + std::to_string(r.job) + " is a " + std::string{to_string(it->second.kind)} +
               ", the result says " + std::string{to_string(r.kind)});
    ++stats_.rejected_results;
    return true;
  }
  const tier_job_state js = std::move(it->second);
  tier_jobs_.erase(it);
  if (!r.ok) failed_flush_.push_back(r.job);  // its slots go back to the pool (see below)
  switch (js.kind) {
    case transfer_kind::cascade:
      if (auto s = manager_->complete_load(js.keys); !s.ok()) {
        reject(
            rejected, first_error, errc::internal,
            "job " + std::to_string(r.job) + ": unpinning cascaded blocks failed: " + s.message());
        ++stats_.rejected_results;
      }
      for (const block_key& k : js.keys) (void)tier_->complete_cascade(k, r.ok);
      break;
    case transfer_kind::promotion:
      manager_->complete_store(js.keys, r.ok);  // ok: pool hits now; failed: slots freed
      for (const block_key& k : js.keys) {
        (void)tier_->complete_promotion(k, r.ok);
        promoting_.erase(k);
      }
      break;
    default:  // check
      for (const block_key& k : js.keys) tier_->on_lookup_result(k, r.ok);
      break;
  }
  return true;
}

}  // namespace kvc::scheduler
