#pragma once
/// step_coordinator: the coordinator's state and every decision it makes, on top of
/// completion_aggregator: it turns the job timeouts into deadlines, applies each rank's step
/// report, rank arrivals and departures, and hands out released step outputs. What happened
/// that an operator should know (rejected reports, refused calls, jobs failed by a rank's loss
/// or a deadline) comes back as notes; the coordinator actor logs them.
///
/// Recovery rules (docs/faults.md). Every job has a deadline by default: `job_timeout` after it
/// was planned and `job_timeout_steps` steps later (whichever comes first); past it the job
/// fails with errc::timeout for the ranks that stayed silent. A deadline also releases: once a
/// job timed out, the next poll_output hands out every result decided so far (stamped with the
/// latest planned step, or the step after the last output) even when a silent rank holds the
/// step barrier back, so no result waits longer than its deadline. Duplicates and late reports
/// are counted and dropped (the aggregator's stats), a lost rank's pending jobs fail at once, a
/// job completes exactly once and never before every rank succeeded.
///
/// Pure: no CAF, no threads, no clock (callers pass `now`, nanoseconds on their monotonic
/// clock), no logging. The coordinator actor drives it through step_core (step_core.hpp), where a
/// decorator may wrap it. Not thread-safe: one owner.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <deque>
#include <utility>
#include <vector>

#include "actors/coordinator/completion_aggregator.hpp"
#include "actors/coordinator/step_core.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/defaults.hpp"
#include "proto/status.hpp"
#include "proto/step_report.hpp"

namespace kvc::coordinator {

struct coordinator_options {
  /// The default deadlines: far above a healthy transfer (milliseconds) and an engine's
  /// stall, well below "forever".
  static constexpr std::chrono::milliseconds default_job_timeout{defaults::job_timeout_ms};
  static constexpr uint64_t default_job_timeout_steps = defaults::job_timeout_steps;

  uint32_t world_size = 1;
  size_t finished_memory = 4096;
  /// A job not completed this long after its step was planned fails with errc::timeout;
  /// 0: no time deadline.
  std::chrono::nanoseconds job_timeout{default_job_timeout};
  /// A job not completed once this many later steps were planned fails with errc::timeout;
  /// 0: no step deadline.
  uint64_t job_timeout_steps = default_job_timeout_steps;
  /// How long never-expected jobs and failed jobs' stragglers are waited for.
  std::chrono::nanoseconds straggler_grace{std::chrono::seconds{30}};
};

/// world size in [1, max_world_size], timeout and grace >= 0; errc::invalid_argument naming
/// the field otherwise.
status validate(const coordinator_options& opts);

class step_coordinator final : public step_core {
 public:
  /// Errors: validate(opts)'s.
  static result<step_coordinator> create(const coordinator_options& opts);

  /// A rank's report of one step; closes the step for the rank.
  void report(const step_report& r) override;
  /// The scheduler planned this step's jobs at time `now`. Step deadlines up to meta.step pass
  /// first.
  void expect(const connector_metadata& meta, uint64_t now) override;
  void rank_up(rank_id rank, uint32_t incarnation) override;
  void rank_down(rank_id rank) override;
  /// Deadlines and grace periods up to `now`.
  void tick(uint64_t now) override;
  /// The engine decided these jobs itself (completion_aggregator::forget_jobs).
  void forget_jobs(std::span<const job_id> jobs) override;

  /// The next released step output: completion_aggregator::poll_output, or after a job timed
  /// out, every result decided so far (see the recovery rules above), or, once a step passed
  /// its time deadline without every alive rank closing it, an output stamped with the latest
  /// planned step (possibly without results): a report lost on the way must not hold an engine
  /// that waits for that step's output, even when the step had no job to time out.
  std::optional<connector_output> poll_output() override;
  bool needs_tick() const noexcept override {
    return agg_.needs_expire() || !open_steps_.empty();
  }
  /// What the coordinator counted: duplicates, late reports, timeouts, ... (the aggregator's).
  const aggregator_stats& stats() const noexcept { return agg_.stats(); }
  const completion_aggregator& aggregator() const noexcept { return agg_; }
  /// What happened since the last call, for the caller to log.
  std::vector<coordinator_note> take_notes() override { return std::exchange(notes_, {}); }
  const step_coordinator& state() const noexcept override { return *this; }

 private:
  step_coordinator(completion_aggregator agg, std::chrono::nanoseconds job_timeout,
                   uint64_t job_timeout_steps)
      : agg_(std::move(agg)), job_timeout_(job_timeout), job_timeout_steps_(job_timeout_steps) {}
  void timed_out(size_t n, const char* by);
  void note(coordinator_note::level lvl, std::string text);
  void note_failure(const char* what, const status& st);
  void expect_one(job_id job, transfer_kind kind, step_id step, std::optional<uint64_t> deadline,
                  std::optional<step_id> step_deadline);

  completion_aggregator agg_;
  std::chrono::nanoseconds job_timeout_;
  uint64_t job_timeout_steps_;
  std::optional<step_id> planned_;  ///< the latest planned step
  bool flush_due_ = false;          ///< a job timed out: release what is decided
  /// Drops the open steps whose output was released.
  void forget_released_steps();
  /// Releases every open step (the oldest passed its deadline, `by` time or steps).
  void release_open_steps(const char* by);

  /// Planned steps whose output was not released yet, with their time deadline (job_timeout
  /// after planning; UINT64_MAX without one: job_timeout_steps later steps release it then).
  /// Oldest first; empty when neither deadline is set.
  std::deque<std::pair<step_id, uint64_t>> open_steps_;
  bool step_release_due_ = false;  ///< a step passed its deadline: release up to planned_
  std::vector<coordinator_note> notes_;
};

}  // namespace kvc::coordinator
