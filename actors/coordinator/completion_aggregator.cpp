#include "actors/coordinator/completion_aggregator.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace kvc::coordinator {

namespace {

uint64_t saturating_add(uint64_t a, uint64_t b) noexcept {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

std::string_view to_string(report_outcome o) noexcept {
  switch (o) {
    case report_outcome::accepted:
      return "accepted";
    case report_outcome::completed:
      return "completed";
    case report_outcome::failed:
      return "failed";
    case report_outcome::absorbed:
      return "absorbed";
    case report_outcome::duplicate:
      return "duplicate";
    case report_outcome::unknown_rank:
      return "unknown_rank";
    case report_outcome::stale_incarnation:
      return "stale_incarnation";
    case report_outcome::future_incarnation:
      return "future_incarnation";
    case report_outcome::kind_mismatch:
      return "kind_mismatch";
  }
  return "unknown_outcome";
}

result<completion_aggregator> completion_aggregator::create(const aggregator_config& cfg) {
  if (cfg.world_size == 0 || cfg.world_size > max_world_size) {
    return make_error(errc::invalid_argument, "world_size must be in [1, " +
                                                  std::to_string(max_world_size) + "], got " +
                                                  std::to_string(cfg.world_size));
  }
  return completion_aggregator{cfg};
}

completion_aggregator::completion_aggregator(const aggregator_config& cfg)
    : world_size_(cfg.world_size),
      finished_memory_(cfg.finished_memory),
      straggler_grace_(cfg.straggler_grace),
      ranks_(cfg.world_size) {}

// -- senders -------------------------------------------------------------------------------------

report_outcome completion_aggregator::check_sender(rank_id rank,
                                                   uint32_t incarnation) const noexcept {
  if (rank >= world_size_) return report_outcome::unknown_rank;
  const rank_state& rs = ranks_[rank];
  if (incarnation < rs.incarnation || (incarnation == rs.incarnation && !rs.alive)) {
    return report_outcome::stale_incarnation;
  }
  if (incarnation > rs.incarnation) return report_outcome::future_incarnation;
  return report_outcome::accepted;
}

status completion_aggregator::sender_error(report_outcome why, rank_id rank,
                                           uint32_t incarnation) const {
  std::string who = "rank " + std::to_string(rank) + " incarnation " + std::to_string(incarnation);
  if (why == report_outcome::unknown_rank) {
    return make_error(errc::invalid_argument,
                      who + ": rank outside world of " + std::to_string(world_size_));
  }
  const rank_state& rs = ranks_[rank];
  return make_error(errc::precondition_failed,
                    who + ": " + std::string(to_string(why)) + " (current incarnation " +
                        std::to_string(rs.incarnation) + (rs.alive ? ", alive)" : ", lost)"));
}

status completion_aggregator::on_step_closed(rank_id rank, uint32_t incarnation, step_id step) {
  if (auto why = check_sender(rank, incarnation); why != report_outcome::accepted) {
    return sender_error(why, rank, incarnation);
  }
  rank_state& rs = ranks_[rank];
  if (rs.closed && step < *rs.closed) {
    return make_error(errc::invalid_argument, "rank " + std::to_string(rank) + " closed step " +
                                                  std::to_string(step) + " after step " +
                                                  std::to_string(*rs.closed));
  }
  rs.closed = step;
  return status::success();
}

result<size_t> completion_aggregator::on_rank_registered(rank_id rank, uint32_t incarnation) {
  if (rank >= world_size_) return sender_error(report_outcome::unknown_rank, rank, incarnation);
  rank_state& rs = ranks_[rank];
  if (incarnation < rs.incarnation) {
    return sender_error(report_outcome::stale_incarnation, rank, incarnation);
  }
  if (incarnation == rs.incarnation) {
    if (rs.alive) return size_t{0};
    return sender_error(report_outcome::stale_incarnation, rank, incarnation);
  }
  size_t failed =
      rs.alive ? lose(rank, "rank " + std::to_string(rank) + " restarted before reporting it")
               : 0;
  ++stats_.rank_restarts;
  rs.incarnation = incarnation;
  rs.alive = true;
  rs.next_seq = 0;
  // A restarted rank resumes at the current barrier instead of pulling it back.
  rs.closed = last_emitted_;
  return failed;
}

result<size_t> completion_aggregator::on_rank_lost(rank_id rank) {
  if (rank >= world_size_) return sender_error(report_outcome::unknown_rank, rank, 0);
  rank_state& rs = ranks_[rank];
  if (!rs.alive) return size_t{0};
  size_t failed = lose(rank, "rank " + std::to_string(rank) + " was lost before reporting it");
  rs.alive = false;
  ++stats_.rank_losses;
  return failed;
}

std::vector<completion_aggregator::lost_rank> completion_aggregator::lost_ranks() const {
  std::vector<lost_rank> out;
  for (rank_id r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r].alive) out.push_back({r, ranks_[r].incarnation});
  }
  return out;
}

size_t completion_aggregator::lose(rank_id rank, const std::string& why) {
  size_t failed = 0;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    job_entry& e = it->second;
    if (e.heard.test(rank)) {
      ++it;
      continue;
    }
    e.heard.set(rank);
    ++e.heard_count;
    auto next = std::next(it);
    if (!e.decided) {
      ++failed;
      fail(it, errc::io_error, why);
    } else {
      release_if_finished(it);
    }
    it = next;
  }
  return failed;
}

// -- jobs ----------------------------------------------------------------------------------------

status completion_aggregator::expect(job_id job, transfer_kind kind, step_id step,
                                     std::optional<uint64_t> deadline,
                                     std::optional<step_id> step_deadline) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    if (finished_.count(job) != 0) {
      return make_error(errc::invalid_argument,
                        "job " + std::to_string(job) + " was already expected and finished");
    }
    it = jobs_.emplace(job, job_entry{}).first;
    job_entry& e = it->second;
    e.result.job = job;
    e.result.kind = kind;
    e.step = step;
    e.expected = true;
    set_deadline(e, deadline);
    set_step_deadline(e, step_deadline);
    // A rank that is lost now will never run the job: it fails at once (its result joins the
    // next output), and the lost ranks count as heard so that the entry can be freed.
    std::string lost;
    for (rank_id r = 0; r < world_size_; ++r) {
      if (ranks_[r].alive) continue;
      e.heard.set(r);
      ++e.heard_count;
      lost += (lost.empty() ? "" : ", ") + std::to_string(r);
    }
    if (!lost.empty()) fail(it, errc::io_error, "planned while rank(s) " + lost + " were lost");
    return status::success();
  }
  job_entry& e = it->second;
  if (e.expected) {
    return make_error(errc::invalid_argument, "job " + std::to_string(job) + " expected twice");
  }
  // Workers reported first (lazy tracking): the scheduler's view of the job wins.
  e.expected = true;
  e.step = std::max(e.step, step);
  set_deadline(e, deadline);
  if (!e.decided) set_step_deadline(e, step_deadline);
  if (e.result.kind != kind) {
    e.result.kind = kind;
    if (e.decided) {
      e.result.ok = false;
      e.result.error = errc::protocol_mismatch;
      e.result.detail = "the workers reported it as another kind";
    } else {
      fail(it, errc::protocol_mismatch, "the workers reported it as another kind");
      return status::success();
    }
  }
  if (e.decided) {
    emit(e);
    release_if_finished(it);
  }
  return status::success();
}

report_outcome completion_aggregator::on_report(const completion_event& ev) {
  ++stats_.reports;
  if (auto why = check_sender(ev.rank, ev.incarnation); why != report_outcome::accepted) {
    ++stats_.rejected;
    return why;
  }
  rank_state& rs = ranks_[ev.rank];
  if (ev.seq > rs.next_seq) stats_.sequence_gaps += ev.seq - rs.next_seq;
  rs.next_seq = std::max(rs.next_seq, ev.seq + 1);

  auto it = jobs_.find(ev.job);
  if (it == jobs_.end()) {
    if (auto f = finished_.find(ev.job); f != finished_.end()) {
      if (f->second == finish::all_heard) {
        ++stats_.duplicates;
        return report_outcome::duplicate;
      }
      ++stats_.absorbed;
      if (f->second == finish::timed_out) ++stats_.late;
      return report_outcome::absorbed;
    }
    it = jobs_.emplace(ev.job, job_entry{}).first;  // lazy: expect() has not arrived yet
    it->second.result.job = ev.job;
    it->second.result.kind = ev.kind;
    unstamped_.push_back(ev.job);
  }
  job_entry& e = it->second;
  if (ev.kind != e.result.kind) {
    ++stats_.rejected;
    return report_outcome::kind_mismatch;
  }
  if (e.heard.test(ev.rank)) {
    ++stats_.duplicates;
    return report_outcome::duplicate;
  }
  e.heard.set(ev.rank);
  ++e.heard_count;
  if (e.decided) {
    ++stats_.absorbed;
    if (e.result.error == errc::timeout) ++stats_.late;
    release_if_finished(it);
    return report_outcome::absorbed;
  }
  e.step = std::max(e.step, ev.step);
  e.result.bytes += ev.bytes;
  e.result.seconds = std::max(e.result.seconds, ev.seconds);
  if (!ev.ok) {
    fail(it, ev.error != errc::ok ? ev.error : errc::internal,
         "rank " + std::to_string(ev.rank) + (ev.detail.empty() ? "" : ": " + ev.detail));
    return report_outcome::failed;
  }
  if (e.heard_count == world_size_) {
    succeed(it);
    return report_outcome::completed;
  }
  return report_outcome::accepted;
}

void completion_aggregator::fail(job_map::iterator it, errc why, std::string detail) {
  job_entry& e = it->second;
  e.decided = true;
  set_step_deadline(e, std::nullopt);
  e.result.ok = false;
  e.result.error = why;
  e.result.detail = clip_detail(detail);
  if (e.expected) {
    emit(e);
    release_if_finished(it);
  }
}

void completion_aggregator::succeed(job_map::iterator it) {
  job_entry& e = it->second;
  e.decided = true;
  set_step_deadline(e, std::nullopt);
  e.result.ok = true;
  e.result.error = errc::ok;
  if (e.expected) {
    emit(e);
    release_if_finished(it);
  }
}

void completion_aggregator::emit(job_entry& e) {
  if (e.result.ok) {
    ++stats_.completed;
  } else {
    ++stats_.failed;
  }
  ready_[std::max(e.step, next_step())].push_back(e.result);
}

bool completion_aggregator::release_if_finished(job_map::iterator it) {
  const job_entry& e = it->second;
  if (!(e.decided && e.expected && e.heard_count == world_size_)) return false;
  forget(it, /*remember=*/true);
  return true;
}

completion_aggregator::job_map::iterator completion_aggregator::forget(job_map::iterator it,
                                                                       bool remember) {
  job_entry& e = it->second;
  if (e.deadline) deadlines_.erase({*e.deadline, it->first});
  if (e.step_deadline) step_deadlines_.erase({*e.step_deadline, it->first});
  const finish how = e.heard_count == world_size_      ? finish::all_heard
                     : e.result.error == errc::timeout ? finish::timed_out
                                                       : finish::cut_short;
  if (remember && finished_memory_ > 0) {
    if (finished_.emplace(it->first, how).second) {
      finished_order_.push_back(it->first);
      if (finished_order_.size() > finished_memory_) {
        finished_.erase(finished_order_.front());
        finished_order_.pop_front();
      }
    }
  }
  return jobs_.erase(it);
}

void completion_aggregator::set_deadline(job_entry& e, std::optional<uint64_t> deadline) {
  if (e.deadline) deadlines_.erase({*e.deadline, e.result.job});
  e.deadline = deadline;
  if (deadline) deadlines_.emplace(*deadline, e.result.job);
}

void completion_aggregator::set_step_deadline(job_entry& e, std::optional<step_id> deadline) {
  if (e.step_deadline) step_deadlines_.erase({*e.step_deadline, e.result.job});
  e.step_deadline = deadline;
  if (deadline) step_deadlines_.emplace(*deadline, e.result.job);
}

void completion_aggregator::time_out(job_map::iterator it, uint64_t now) {
  ++stats_.timed_out;
  std::string silent;
  for (rank_id r = 0; r < world_size_; ++r) {
    if (!it->second.heard.test(r)) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
  }
  fail(it, errc::timeout, "no report from rank(s) " + silent + " by its deadline");
  // not freed: some rank has not reported
  set_deadline(it->second, saturating_add(now, straggler_grace_));
}

size_t completion_aggregator::forget_jobs(std::span<const job_id> jobs) {
  size_t tracked = 0;
  for (const job_id job : jobs) {
    const auto it = jobs_.find(job);
    if (it == jobs_.end()) continue;
    ++tracked;
    forget(it, /*remember=*/true);
  }
  stats_.forgotten += tracked;
  return tracked;
}

size_t completion_aggregator::expire_steps(step_id step, uint64_t now) {
  size_t timed_out = 0;
  while (!step_deadlines_.empty() && step_deadlines_.begin()->first <= step) {
    auto it = jobs_.find(step_deadlines_.begin()->second);
    step_deadlines_.erase(step_deadlines_.begin());
    if (it == jobs_.end()) continue;  // cannot happen: forget() and deciding unlist them
    it->second.step_deadline.reset();
    ++timed_out;
    time_out(it, now);
  }
  return timed_out;
}

size_t completion_aggregator::expire(uint64_t now) {
  size_t timed_out = 0;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    job_id job = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    auto it = jobs_.find(job);
    if (it == jobs_.end()) continue;  // cannot happen: forget() unlists deadlines
    job_entry& e = it->second;
    e.deadline.reset();
    if (!e.expected) {
      ++stats_.orphans_dropped;
      forget(it, /*remember=*/false);
    } else if (!e.decided) {
      ++timed_out;
      time_out(it, now);
    } else {
      forget(it, /*remember=*/true);  // the straggler window of a failed job ran out
    }
  }
  for (job_id job : unstamped_) {
    auto it = jobs_.find(job);
    if (it != jobs_.end() && !it->second.expected && !it->second.deadline) {
      set_deadline(it->second, saturating_add(now, straggler_grace_));
    }
  }
  unstamped_.clear();
  return timed_out;
}

// -- outputs -------------------------------------------------------------------------------------

std::optional<step_id> completion_aggregator::closed_step() const noexcept {
  std::optional<step_id> barrier;
  for (const rank_state& rs : ranks_) {
    if (!rs.alive) continue;
    if (!rs.closed) return std::nullopt;
    barrier = barrier ? std::min(*barrier, *rs.closed) : *rs.closed;
  }
  return barrier;
}

std::optional<connector_output> completion_aggregator::poll_output() {
  if (auto barrier = closed_step()) {
    if (!last_emitted_ || *barrier > *last_emitted_) return take_output(*barrier);
    return std::nullopt;
  }
  bool any_alive = std::any_of(ranks_.begin(), ranks_.end(), [](auto& r) { return r.alive; });
  if (!any_alive && !ready_.empty()) {
    return take_output(std::max(next_step(), ready_.rbegin()->first));
  }
  return std::nullopt;
}

connector_output completion_aggregator::take_output(step_id step) {
  connector_output out;
  out.step = step;
  auto end = ready_.upper_bound(step);
  for (auto it = ready_.begin(); it != end; ++it) {
    out.jobs.insert(out.jobs.end(), it->second.begin(), it->second.end());
  }
  ready_.erase(ready_.begin(), end);
  if (!last_emitted_ || step > *last_emitted_) last_emitted_ = step;
  return out;
}

size_t completion_aggregator::pending_results() const noexcept {
  size_t n = 0;
  for (const auto& [step, results] : ready_) n += results.size();
  return n;
}

}  // namespace kvc::coordinator
