#include "actors/worker/tier_executor.hpp"

#include <utility>

namespace kvc::worker {

tier_executor::tier_executor(disk::file_io& io, cpu_pool_region pool, uint64_t payload_bytes,
                             std::optional<tier_fault_decider> faults)
    : io_(&io), pool_(pool), payload_bytes_(payload_bytes), faults_(std::move(faults)) {}

void tier_executor::start(const connector_metadata& meta) {
  for (const block_key& k : meta.tier_removed) {
    const uint64_t t = next_ticket_++;
    tickets_.emplace(t, ticket_of{.removal = true});
    io_->submit_remove(t, k);
  }
  for (const tier_job& j : meta.tier_jobs) start_job(j);
}

void tier_executor::start_job(const tier_job& j) {
  job_result failed{.job = j.id, .kind = j.kind};
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
  js.result = job_result{.job = j.id, .kind = j.kind, .ok = true};
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
      io_->submit_write(t, j.keys[i], {p, payload_bytes_});
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
  job_result r = std::move(it->second.result);
  r.seconds = std::chrono::duration<double>(clock::now() - it->second.started).count();
  if (!r.ok) r.bytes = 0;
  jobs_.erase(it);
  finished_.push_back(std::move(r));
}

std::vector<job_result> tier_executor::take_finished() {
  apply(io_->take_completions());
  return std::exchange(finished_, {});
}

void tier_executor::wait_all() {
  while (!tickets_.empty()) apply(io_->wait_completions());
}

}  // namespace kvc::worker
