#pragma once
/// completion_aggregator: turns the completion reports of world_size = TP×PP ranks into one
/// result per job (kvc::job_result) and one output per engine step (kvc::connector_output).
/// It is the pure core of the coordinator actor and replaces vLLM's KVOutputAggregator
/// (reference §7), fixing its weaknesses: duplicates are recognised instead of completing a job
/// early, a silent rank or a lost one fails the job instead of stalling it forever.
///
/// Jobs. A job is *done* when every rank reported success, *failed* as soon as one rank reports
/// a failure, one of its deadlines passes (errc::timeout: a time, checked by expire(now), and a
/// step, checked by expire_steps(step)) or a rank it still waits on is lost or restarts
/// (errc::io_error); a job expected while a rank is lost fails at once (io_error: that rank will
/// never run it). Its result is sum(bytes) and max(seconds) over the reports seen until then.
/// Reports that arrive after a failure are absorbed and never change the result; those of a job
/// that timed out are also counted as late.
///
/// Senders. Ranks start alive at incarnation 0. on_rank_registered(rank, n) with a higher n
/// means the rank restarted: the old incarnation's unreported jobs fail and its reports are
/// stale from then on. Reports of an unknown rank (>= world_size), of a stale incarnation, of
/// an incarnation not registered yet, or naming a different kind than the job's are dropped and
/// the outcome says so (the caller logs it). A second report of the same (rank, job) is a
/// duplicate: ignored and counted. Per-rank sequence numbers only feed a gap counter.
///
/// Lazy tracking. A worker may report before the scheduler's expect() arrives (they travel on
/// different paths). Such a job is tracked from its first report, but its result is held until
/// expect() arrives: only expected jobs ever produce a result, so a straggler of a long-forgotten
/// job can never produce a second one. A job that is never expected is dropped after
/// `straggler_grace` (counted as an orphan; its deadline is set at the first expire() call after
/// its first report, as the class has no clock).
///
/// Steps. Each rank closes its steps in order (on_step_closed: "I reported everything of step s").
/// The output of step s becomes available once every alive rank has closed s; it carries the
/// results whose last report was in a step <= s (results decided out of band — timeouts, rank
/// loss, late expects — join the next output). poll_output() hands out one output per barrier
/// advance, with strictly increasing step stamps; lost ranks do not hold the barrier back, and
/// with no alive rank the pending results are flushed at once.
///
/// Memory. A job's entry is freed when its result is emitted and no further report can come
/// (every rank heard from or lost); a failed job still waiting for stragglers is freed at its
/// deadline (the expect deadline, or now + straggler_grace once it timed out; a job expected
/// without deadline waits for every rank or their loss). The ids of the last `finished_memory`
/// freed jobs are remembered so that late duplicates are recognised.
///
/// Time is an opaque uint64_t on the caller's monotonic clock (nanoseconds by convention).
/// Cost: O(1) expected per report (hash lookups, bit tests), plus O(log n) once per job for its
/// deadline; on_step_closed/poll_output are O(world_size); on_rank_lost is O(tracked jobs).
/// Not thread-safe: one actor owns it.
#include <bitset>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "proto/completion.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "proto/topology.hpp"

namespace kvc::coordinator {

/// What became of one completion report.
enum class report_outcome : uint8_t {
  accepted = 0,            ///< counted; the job still waits for other ranks
  completed = 1,           ///< the last missing success: the job is done
  failed = 2,              ///< the first failure: the job failed
  absorbed = 3,            ///< a straggler of a job that already failed: ignored
  duplicate = 4,           ///< this rank already reported this job: ignored, counted
  unknown_rank = 5,        ///< rank >= world_size: dropped
  stale_incarnation = 6,   ///< older than the rank's incarnation, or the rank is lost: dropped
  future_incarnation = 7,  ///< newer than the registered incarnation: dropped
  kind_mismatch = 8,       ///< load/store differs from the job's kind: dropped
};

/// Stable lower-case name, e.g. "stale_incarnation".
std::string_view to_string(report_outcome o) noexcept;

/// True for the outcomes that drop a report from a misbehaving or outdated sender: worth a
/// warning in the log (duplicates and absorbed stragglers are normal and only counted).
constexpr bool is_rejected(report_outcome o) noexcept {
  return o >= report_outcome::unknown_rank;
}

struct aggregator_config {
  uint32_t world_size = 1;        ///< TP×PP ranks, 1..max_world_size
  size_t finished_memory = 4096;  ///< freed job ids remembered to classify late duplicates
  /// How long a never-expected job or a failed job's stragglers are waited for.
  uint64_t straggler_grace = 30'000'000'000;
};

struct aggregator_stats {
  uint64_t reports = 0;  ///< on_report calls
  uint64_t duplicates = 0;
  uint64_t absorbed = 0;
  uint64_t rejected = 0;         ///< unknown rank, stale/future incarnation, kind mismatch
  uint64_t sequence_gaps = 0;    ///< reports missing according to the senders' seq numbers
  uint64_t completed = 0;        ///< successful results emitted
  uint64_t failed = 0;           ///< failed results emitted (any cause)
  uint64_t timed_out = 0;        ///< jobs failed by their deadline (time or step)
  uint64_t late = 0;             ///< absorbed reports of jobs that had timed out
  uint64_t orphans_dropped = 0;  ///< never-expected jobs forgotten after the grace
  uint64_t rank_losses = 0;      ///< an alive rank lost (on_rank_lost)
  uint64_t rank_restarts = 0;    ///< a rank registered with a higher incarnation
  uint64_t forgotten = 0;        ///< tracked jobs the engine decided itself (forget_jobs)

  friend bool operator==(const aggregator_stats&, const aggregator_stats&) = default;
};

class completion_aggregator {
 public:
  /// Error (invalid_argument) unless 1 <= world_size <= max_world_size.
  static result<completion_aggregator> create(const aggregator_config& cfg);

  /// The scheduler planned `job` (of `kind`) in `step`; it fails with errc::timeout once
  /// expire(now) sees now >= deadline (no deadline: never times out). If workers already
  /// reported it, a held result is released (and a kind disagreement fails the job with
  /// errc::protocol_mismatch). Error (invalid_argument), nothing changed, if `job` was
  /// already expected.
  /// `step_deadline`: it also fails once expire_steps(s) sees s >= step_deadline.
  status expect(job_id job, transfer_kind kind, step_id step, std::optional<uint64_t> deadline,
                std::optional<step_id> step_deadline = std::nullopt);

  /// One rank's report for one job.
  report_outcome on_report(const completion_event& ev);

  /// `rank` has reported everything of `step` (and of the steps before). Error, nothing changed:
  /// unknown rank (invalid_argument), stale/future incarnation or lost rank
  /// (precondition_failed), a step lower than one it closed before (invalid_argument).
  status on_step_closed(rank_id rank, uint32_t incarnation, step_id step);

  /// `rank` is alive with `incarnation`. The same incarnation again is a no-op; a higher one is
  /// a restart: the jobs the old incarnation had not reported fail (returns how many). Error,
  /// nothing changed: unknown rank, a lower incarnation, or the current one of a lost rank.
  result<size_t> on_rank_registered(rank_id rank, uint32_t incarnation);

  /// `rank` is gone (process died, heartbeat lost): every job it has not reported fails with
  /// errc::io_error (returns how many) and it no longer holds the step barrier back. Losing a
  /// lost rank again is a no-op. Error (invalid_argument) for an unknown rank.
  result<size_t> on_rank_lost(rank_id rank);

  /// The engine decided these jobs itself (a replay playing the workers' part passed their
  /// results, or its own finished sets, to the planner): each tracked one is forgotten without
  /// a result, its deadlines with it, and remembered like a failed job's, so that a rank's late
  /// report is absorbed. A result decided before and not handed out yet still goes out.
  /// Unknown ids are skipped. Returns how many were tracked. Without it such a job waits for
  /// reports that never come: held until its deadline, which then fails it (or forever).
  size_t forget_jobs(std::span<const job_id> jobs);

  /// Fails expected jobs whose deadline is <= now (errc::timeout; returns how many), drops
  /// never-expected jobs and failed jobs' straggler windows that ran out, and starts the grace
  /// period of jobs first reported since the previous call.
  size_t expire(uint64_t now);
  /// Fails expected jobs whose step deadline is <= `step` (errc::timeout; returns how many);
  /// their stragglers are awaited until now + straggler_grace.
  size_t expire_steps(step_id step, uint64_t now);

  /// The next step output when the step barrier advanced (or, with no alive rank, when results
  /// are pending); std::nullopt otherwise. Call after every other mutating call.
  std::optional<connector_output> poll_output();

  /// All pending results decided in a step <= `step`, stamped `step`, regardless of the barrier
  /// (poll_output is the normal path). Later poll_output calls stamp higher steps only.
  connector_output take_output(step_id step);

  /// The step stamp of the last output handed out; std::nullopt before the first.
  std::optional<step_id> last_output_step() const noexcept { return last_emitted_; }
  /// Highest step every alive rank has closed; std::nullopt while one has closed none (or none
  /// is alive).
  std::optional<step_id> closed_step() const noexcept;
  /// True when expire() has work: a deadline is pending or a new job awaits its grace period.
  bool needs_expire() const noexcept { return !deadlines_.empty() || !unstamped_.empty(); }
  /// True when expire_steps() has work.
  bool needs_expire_steps() const noexcept { return !step_deadlines_.empty(); }
  /// Jobs with live state (pending, held, or failed and absorbing stragglers).
  size_t tracked_jobs() const noexcept { return jobs_.size(); }
  /// Freed job ids remembered for duplicate detection (<= finished_memory).
  size_t remembered_jobs() const noexcept { return finished_order_.size(); }
  /// Results decided but not yet handed out.
  size_t pending_results() const noexcept;
  /// Entries of each per-job table: all 0 but `remembered` (bounded by finished_memory) at
  /// quiescence, whatever the number of steps before (flat memory; tests assert it).
  struct tables {
    size_t jobs = 0;
    size_t deadlines = 0;
    size_t unstamped = 0;
    size_t ready_steps = 0;
    size_t remembered = 0;
  };
  tables table_sizes() const noexcept {
    return {jobs_.size(), deadlines_.size(), unstamped_.size(), ready_.size(),
            finished_order_.size()};
  }
  uint32_t world_size() const noexcept { return world_size_; }
  const aggregator_stats& stats() const noexcept { return stats_; }

  /// A rank that is lost now, with the incarnation it was lost as.
  struct lost_rank {
    rank_id rank = 0;
    uint32_t incarnation = 0;
    friend bool operator==(const lost_rank&, const lost_rank&) = default;
  };
  /// The ranks lost and not registered again, by ascending rank. O(world_size).
  std::vector<lost_rank> lost_ranks() const;

 private:
  struct rank_state {
    uint32_t incarnation = 0;
    bool alive = true;
    std::optional<step_id> closed;
    uint64_t next_seq = 0;
  };

  struct job_entry {
    job_result result;                  // kind, bytes, seconds so far; ok/error once decided
    step_id step = 0;                   // max(expected step, report steps): the output bucket
    std::bitset<max_world_size> heard;  // ranks that reported it or were lost before reporting
    uint32_t heard_count = 0;
    bool expected = false;
    bool decided = false;
    std::optional<uint64_t> deadline;      // present iff listed in deadlines_
    std::optional<step_id> step_deadline;  // present iff listed in step_deadlines_
  };

  /// How a freed job ended, for classifying its late reports.
  enum class finish : uint8_t { all_heard = 0, cut_short = 1, timed_out = 2 };

  using job_map = std::unordered_map<job_id, job_entry>;

  explicit completion_aggregator(const aggregator_config& cfg);

  /// report_outcome::accepted when (rank, incarnation) may speak, else why not.
  report_outcome check_sender(rank_id rank, uint32_t incarnation) const noexcept;
  status sender_error(report_outcome why, rank_id rank, uint32_t incarnation) const;
  step_id next_step() const noexcept { return last_emitted_ ? *last_emitted_ + 1 : 0; }

  /// Decide the job (emitting it if expected; the entry may be freed: do not use `it` after).
  void fail(job_map::iterator it, errc why, std::string detail);
  void succeed(job_map::iterator it);
  void emit(job_entry& e);
  /// Frees the entry if nothing more can come for it. True if freed.
  bool release_if_finished(job_map::iterator it);
  job_map::iterator forget(job_map::iterator it, bool remember);
  void set_deadline(job_entry& e, std::optional<uint64_t> deadline);
  void set_step_deadline(job_entry& e, std::optional<step_id> deadline);
  /// Times an undecided expected job out; its stragglers are awaited until now + grace.
  void time_out(job_map::iterator it, uint64_t now);
  /// Fails / accounts every job not yet heard from `rank`; returns how many failed.
  size_t lose(rank_id rank, const std::string& why);

  uint32_t world_size_;
  size_t finished_memory_;
  uint64_t straggler_grace_;
  std::vector<rank_state> ranks_;
  job_map jobs_;
  std::set<std::pair<uint64_t, job_id>> deadlines_;
  std::set<std::pair<step_id, job_id>> step_deadlines_;
  std::vector<job_id> unstamped_;                     // first reported since the last expire()
  std::unordered_map<job_id, finish> finished_;       // freed id -> how it ended
  std::deque<job_id> finished_order_;                 // FIFO bound of finished_
  std::map<step_id, std::vector<job_result>> ready_;  // output bucket -> results
  std::optional<step_id> last_emitted_;
  aggregator_stats stats_;
};

}  // namespace kvc::coordinator
