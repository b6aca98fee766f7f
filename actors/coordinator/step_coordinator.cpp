#include "actors/coordinator/step_coordinator.hpp"

namespace kvc::coordinator {

using level = coordinator_note::level;

status validate(const coordinator_options& opts) {
  if (opts.world_size == 0 || opts.world_size > max_world_size) {
    return make_error(errc::invalid_argument, "coordinator: world size must be in [1, " +
                                                  std::to_string(max_world_size) + "], got " +
                                                  std::to_string(opts.world_size));
  }
  if (opts.job_timeout.count() < 0 || opts.straggler_grace.count() < 0) {
    return make_error(errc::invalid_argument,
                      "coordinator: job timeout and straggler grace must be >= 0");
  }
  return status::success();
}

result<step_coordinator> step_coordinator::create(const coordinator_options& opts) {
  if (auto st = validate(opts); !st) return st;
  auto agg = completion_aggregator::create(
      {.world_size = opts.world_size,
       .finished_memory = opts.finished_memory,
       .straggler_grace = static_cast<uint64_t>(opts.straggler_grace.count())});
  if (!agg) return agg.error();
  return step_coordinator{std::move(agg).value(), opts.job_timeout, opts.job_timeout_steps};
}

void step_coordinator::note(level lvl, std::string text) {
  notes_.push_back({lvl, std::move(text)});
}

void step_coordinator::note_failure(const char* what, const status& st) {
  if (!st.ok()) note(level::warn, std::string{"coordinator: "} + what + ": " + st.to_string());
}

void step_coordinator::report(const step_report& r) {
  for (const completion_event& ev : r.events) {
    const report_outcome outcome = agg_.on_report(ev);
    if (is_rejected(outcome)) {
      note(level::warn, "coordinator: dropped report of job " + std::to_string(ev.job) +
                            " from rank " + std::to_string(ev.rank) + " incarnation " +
                            std::to_string(ev.incarnation) + ": " +
                            std::string{to_string(outcome)});
    } else if (outcome == report_outcome::duplicate) {
      note(level::debug, "coordinator: duplicate report of job " + std::to_string(ev.job) +
                             " from rank " + std::to_string(ev.rank));
    }
  }
  note_failure("closing a step", agg_.on_step_closed(r.rank, r.incarnation, r.step));
}

void step_coordinator::expect_one(job_id job, transfer_kind kind, step_id step,
                                  std::optional<uint64_t> deadline,
                                  std::optional<step_id> step_deadline) {
  note_failure("expect", agg_.expect(job, kind, step, deadline, step_deadline));
}

void step_coordinator::expect(const connector_metadata& meta, uint64_t now) {
  if (!planned_ || meta.step > *planned_) planned_ = meta.step;
  timed_out(agg_.expire_steps(meta.step, now), "steps");
  forget_released_steps();
  if (job_timeout_steps_ > 0 && !open_steps_.empty() &&
      open_steps_.front().first + job_timeout_steps_ <= meta.step) {
    release_open_steps("steps");
  }
  std::optional<uint64_t> deadline;
  if (job_timeout_.count() > 0) deadline = now + static_cast<uint64_t>(job_timeout_.count());
  if (deadline || job_timeout_steps_ > 0) {
    open_steps_.emplace_back(meta.step, deadline.value_or(UINT64_MAX));
  }
  std::optional<step_id> step_deadline;
  if (job_timeout_steps_ > 0) step_deadline = meta.step + job_timeout_steps_;
  for (const transfer_job& j : meta.loads) {
    expect_one(j.id, transfer_kind::load, meta.step, deadline, step_deadline);
  }
  for (const transfer_job& j : meta.stores) {
    expect_one(j.id, transfer_kind::store, meta.step, deadline, step_deadline);
  }
  for (const tier_job& j : meta.tier_jobs) {
    expect_one(j.id, j.kind, meta.step, deadline, step_deadline);
  }
}

void step_coordinator::timed_out(size_t n, const char* by) {
  if (n == 0) return;
  flush_due_ = true;
  note(level::warn, "coordinator: " + std::to_string(n) + " jobs timed out (" + by + ")");
}

std::optional<connector_output> step_coordinator::poll_output() {
  if (auto out = agg_.poll_output()) return out;
  if (!flush_due_ && !step_release_due_) return std::nullopt;
  const bool release_step = std::exchange(step_release_due_, false);
  flush_due_ = false;
  if (!release_step && agg_.pending_results() == 0) return std::nullopt;
  // Stamped with the latest planned step, or past the last output when that was it already.
  const auto last = agg_.last_output_step();
  step_id stamp = planned_.value_or(0);
  if (last && stamp <= *last) stamp = *last + 1;
  return agg_.take_output(stamp);
}

void step_coordinator::rank_up(rank_id rank, uint32_t incarnation) {
  auto failed = agg_.on_rank_registered(rank, incarnation);
  if (!failed.ok()) {
    note_failure("registering a rank", failed.error());
  } else if (*failed > 0) {
    note(level::warn, "coordinator: rank " + std::to_string(rank) + " restarted as incarnation " +
                          std::to_string(incarnation) + ": " + std::to_string(*failed) +
                          " jobs failed");
  }
}

void step_coordinator::rank_down(rank_id rank) {
  auto failed = agg_.on_rank_lost(rank);
  if (!failed.ok()) {
    note_failure("losing a rank", failed.error());
  } else if (*failed > 0) {
    note(level::warn, "coordinator: rank " + std::to_string(rank) +
                          " lost: " + std::to_string(*failed) + " jobs failed");
  } else {
    note(level::info, "coordinator: rank " + std::to_string(rank) + " lost (no job waited on it)");
  }
}

void step_coordinator::tick(uint64_t now) {
  if (agg_.needs_expire()) timed_out(agg_.expire(now), "time");
  forget_released_steps();
  if (!open_steps_.empty() && open_steps_.front().second <= now) release_open_steps("time");
}

void step_coordinator::forget_jobs(std::span<const job_id> jobs) { agg_.forget_jobs(jobs); }

void step_coordinator::forget_released_steps() {
  const auto released = agg_.last_output_step();
  while (!open_steps_.empty() && released && open_steps_.front().first <= *released) {
    open_steps_.pop_front();
  }
}

void step_coordinator::release_open_steps(const char* by) {
  note(level::warn, "coordinator: step " + std::to_string(open_steps_.front().first) +
                        " not closed by every rank within its deadline (" + by + "): released");
  open_steps_.clear();  // the release stamps the latest planned step: it covers them all
  step_release_due_ = true;
}

}  // namespace kvc::coordinator
