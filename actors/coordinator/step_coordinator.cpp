#include "actors/coordinator/step_coordinator.hpp"

#include <spdlog/spdlog.h>

namespace kvc::coordinator {

namespace {

void log_outcome(const completion_event& ev, report_outcome outcome) {
  if (is_rejected(outcome)) {
    spdlog::warn("coordinator: dropped report of job {} from rank {} incarnation {}: {}", ev.job,
                 ev.rank, ev.incarnation, to_string(outcome));
  } else if (outcome == report_outcome::duplicate) {
    spdlog::debug("coordinator: duplicate report of job {} from rank {}", ev.job, ev.rank);
  }
}

void log_failure(const char* what, const status& st) {
  if (!st.ok()) spdlog::warn("coordinator: {}: {}", what, st.to_string());
}

}  // namespace

result<step_coordinator> step_coordinator::create(const aggregator_config& cfg,
                                                  std::chrono::nanoseconds job_timeout) {
  if (job_timeout.count() < 0) {
    return make_error(errc::invalid_argument, "coordinator: job timeout must be >= 0");
  }
  auto agg = completion_aggregator::create(cfg);
  if (!agg) return agg.error();
  return step_coordinator{std::move(agg).value(), job_timeout};
}

void step_coordinator::report(rank_id rank, uint32_t incarnation, step_id step,
                              std::span<const completion_event> events) {
  for (const completion_event& ev : events) log_outcome(ev, agg_.on_report(ev));
  log_failure("closing a step", agg_.on_step_closed(rank, incarnation, step));
}

std::optional<uint64_t> step_coordinator::deadline_from(uint64_t now) const noexcept {
  if (job_timeout_.count() <= 0) return std::nullopt;
  return now + static_cast<uint64_t>(job_timeout_.count());
}

void step_coordinator::expect_one(job_id job, transfer_kind kind, step_id step,
                                  std::optional<uint64_t> deadline) {
  log_failure("expect", agg_.expect(job, kind, step, deadline));
}

void step_coordinator::expect(step_id step, std::span<const job_id> loads,
                              std::span<const job_id> stores, uint64_t now) {
  const auto deadline = deadline_from(now);
  for (job_id j : loads) expect_one(j, transfer_kind::load, step, deadline);
  for (job_id j : stores) expect_one(j, transfer_kind::store, step, deadline);
}

void step_coordinator::expect(const connector_metadata& meta, uint64_t now) {
  const auto deadline = deadline_from(now);
  for (const transfer_job& j : meta.loads) expect_one(j.id, transfer_kind::load, meta.step, deadline);
  for (const transfer_job& j : meta.stores) {
    expect_one(j.id, transfer_kind::store, meta.step, deadline);
  }
}

void step_coordinator::rank_up(rank_id rank, uint32_t incarnation) {
  auto failed = agg_.on_rank_registered(rank, incarnation);
  if (!failed.ok()) {
    log_failure("registering a rank", failed.error());
  } else if (*failed > 0) {
    spdlog::warn("coordinator: rank {} restarted as incarnation {}: {} jobs failed", rank,
                 incarnation, *failed);
  }
}

void step_coordinator::rank_down(rank_id rank) {
  auto failed = agg_.on_rank_lost(rank);
  if (!failed.ok()) {
    log_failure("losing a rank", failed.error());
  } else if (*failed > 0) {
    spdlog::warn("coordinator: rank {} lost: {} jobs failed", rank, *failed);
  } else {
    spdlog::info("coordinator: rank {} lost (no job waited on it)", rank);
  }
}

void step_coordinator::tick(uint64_t now) {
  if (size_t n = agg_.expire(now); n > 0) spdlog::warn("coordinator: {} jobs timed out", n);
}

}  // namespace kvc::coordinator
