#include "actors/worker/tier_executor.hpp"

#include <algorithm>
#include <utility>

namespace kvc::worker {

tier_executor::tier_executor(tier_io& io, cpu_pool_region pool, uint64_t payload_bytes,
                             std::optional<tier_fault_decider> faults)
    : io_(&io), pool_(pool), payload_bytes_(payload_bytes), faults_(std::move(faults)) {}

void tier_executor::start(const connector_metadata& meta, const status& jobs_allowed) {
  flush(meta.flush);
  for (const block_key& k : meta.tier_removed) {
    const uint64_t t = next_ticket_++;
    tickets_.emplace(t, ticket_of{.removal = true, .key = k});
    ++removing_[k];
    io_->submit_remove(t, k);
  }
  for (const tier_job& j : meta.tier_jobs) {
    if (jobs_allowed) {
      start_job(j);
    } else {
      finished_.push_back({.job = j.id,
                           .kind = j.kind,
                           .error = jobs_allowed.code(),
                           .detail = clip_detail("not started: " + jobs_allowed.message())});
    }
  }
}

void tier_executor::flush(std::span<const job_id> ids) {
  std::vector<job_id> flushed;
  for (job_id id : ids) {
    if (jobs_.contains(id)) flushed.push_back(id);
  }
  if (flushed.empty()) return;
  const auto is_flushed = [&](job_id id) {
    return std::find(flushed.begin(), flushed.end(), id) != flushed.end();
  };
  std::vector<uint64_t> tickets;
  for (const auto& [t, of] : tickets_) {
    if (!of.removal && is_flushed(of.job)) tickets.push_back(t);
  }
  // Writes held behind a removal never reached the I/O; the others are withdrawn there if no
  // thread has taken them yet.
  std::vector<uint64_t> withdrawn;
  for (auto h = held_.begin(); h != held_.end();) {
    std::erase_if(h->second, [&](const held_write& w) {
      if (!is_flushed(tickets_.at(w.ticket).job)) return false;
      withdrawn.push_back(w.ticket);
      return true;
    });
    h = h->second.empty() ? held_.erase(h) : std::next(h);
  }
  const std::vector<uint64_t> cancelled = io_->cancel(tickets);
  withdrawn.insert(withdrawn.end(), cancelled.begin(), cancelled.end());
  for (uint64_t t : withdrawn) {
    const job_id id = tickets_.at(t).job;
    tickets_.erase(t);
    job_state& js = jobs_.at(id);
    --js.pending;
    ++stats_.blocks_cancelled;
    fail_block(js, errc::precondition_failed,
               "cancelled by the flush: job " + std::to_string(id) +
                   " failed on another rank or at its deadline before this rank's I/O of "
                   "the block started");
    finish_if_done(id);
  }
  // What is running writes or reads its slots until it completes.
  while (
      std::any_of(flushed.begin(), flushed.end(), [&](job_id id) { return jobs_.contains(id); })) {
    apply(io_->wait_completions());
  }
}

void tier_executor::release_held(const block_key& key) {
  const auto h = held_.find(key);
  if (h == held_.end()) return;
  const std::vector<held_write> writes = std::move(h->second);
  held_.erase(h);
  for (const held_write& w : writes) io_->submit_write(w.ticket, key, w.payload);
}

void tier_executor::start_job(const tier_job& j) {
  rank_job_result failed{.job = j.id, .kind = j.kind};
  if (jobs_.contains(j.id)) {
    failed.error = errc::invalid_argument;
    failed.detail = "file tier job " + std::to_string(j.id) + " is in flight already";
    finished_.push_back(std::move(failed));
    return;
  }
  const bool moves = j.kind != transfer_kind::check;
  if (moves && j.slots.size() != j.keys.size()) {
    failed.error = errc::invalid_argument;
    failed.detail = "file tier job with " + std::to_string(j.slots.size()) + " slots for " +
                    std::to_string(j.keys.size()) + " blocks";
    finished_.push_back(std::move(failed));
    return;
  }
  for (cpu_slot s : j.slots) {
    if (s >= pool_.num_slots) {
      failed.error = errc::invalid_argument;
      failed.detail = "file tier job names slot " + std::to_string(s) + " of " +
                      std::to_string(pool_.num_slots);
      finished_.push_back(std::move(failed));
      return;
    }
  }
  const fault_io_op op = j.kind == transfer_kind::cascade ? fault_io_op::write : fault_io_op::read;
  if (faults_ && faults_->next(op)) {
    failed.error = errc::injected_fault;
    failed.detail = "injected fail_io: file tier " + std::string{to_string(j.kind)} + " job " +
                    std::to_string(j.id) + " failed, no I/O done";
    finished_.push_back(std::move(failed));
    return;
  }
  job_state& js = jobs_[j.id];
  js.kind = j.kind;
  js.pending = static_cast<uint32_t>(j.keys.size());
  js.result = rank_job_result{.job = j.id, .kind = j.kind, .ok = true};
  js.started = clock::now();
  for (size_t i = 0; i < j.keys.size(); ++i) {
    const uint64_t t = next_ticket_++;
    tickets_.emplace(t, ticket_of{.job = j.id});
    if (!moves) {
      io_->submit_check(t, j.keys[i]);
      continue;
    }
    std::byte* slot = pool_.base + uint64_t{j.slots[i]} * pool_.slot_stride;
    char* p = reinterpret_cast<char*>(slot);
    if (j.kind == transfer_kind::cascade) {
      if (removing_.contains(j.keys[i])) {  // written once the old file is gone
        held_[j.keys[i]].push_back({t, {p, payload_bytes_}});
      } else {
        io_->submit_write(t, j.keys[i], {p, payload_bytes_});
      }
    } else {
      io_->submit_read(t, j.keys[i], {p, payload_bytes_});
    }
  }
  finish_if_done(j.id);  // a job of no block
}

void tier_executor::apply(std::vector<disk::io_completion> done) {
  for (disk::io_completion& c : done) {
    const auto t = tickets_.find(c.ticket);
    if (t == tickets_.end()) continue;  // not ours: file_io serves this executor only
    const ticket_of of = t->second;
    tickets_.erase(t);
    if (of.removal) {
      ++(c.outcome.ok() ? stats_.removals : stats_.removals_failed);
      const auto r = removing_.find(of.key);
      if (--r->second == 0) {
        removing_.erase(r);
        release_held(of.key);
      }
      continue;
    }
    job_state& js = jobs_.at(of.job);
    --js.pending;
    if (c.outcome.ok()) {
      js.result.bytes += c.bytes;
      if (c.kind == disk::io_kind::write) stats_.bytes_written += c.bytes;
      if (c.kind == disk::io_kind::read) stats_.bytes_read += c.bytes;
    } else {
      ++stats_.blocks_failed;
      fail_block(js, c.outcome.code(), c.outcome.message());
    }
    finish_if_done(of.job);
  }
}

void tier_executor::fail_block(job_state& js, errc error, std::string why) {
  if (!js.result.ok) return;  // the first failure names the job's
  js.result.ok = false;
  js.result.error = error;
  js.result.detail = clip_detail(why);
}

void tier_executor::finish_if_done(job_id id) {
  const auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.pending > 0) return;
  rank_job_result r = std::move(it->second.result);
  r.seconds = std::chrono::duration<double>(clock::now() - it->second.started).count();
  if (!r.ok) r.bytes = 0;
  jobs_.erase(it);
  finished_.push_back(std::move(r));
}

std::vector<rank_job_result> tier_executor::take_finished() {
  apply(io_->take_completions());
  return std::exchange(finished_, {});
}

void tier_executor::wait_all() {
  while (!tickets_.empty()) apply(io_->wait_completions());
}

}  // namespace kvc::worker
