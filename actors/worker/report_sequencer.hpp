#pragma once
/// report_sequencer: keeps a rank's reports within the coordinator's protocol: exactly one
/// step_report per step, in step order, each carrying the job results observed since the
/// previous report as completion events (stamped with the rank, its incarnation, the step and
/// a sequence number by a completion_stamper). The one place this rule is written; the engine's
/// worker thread drives it through worker_connector.
///
/// open(step) when a step's metadata is bound; add(results) for every get_finished; close()
/// when the metadata is cleared. The first add() of an open step releases its report (with the
/// results held from earlier calls); results of later calls, or of calls between steps, are held
/// for the next step's report. close() releases the report of a step that had no add().
///
/// Pure: no CAF, no clock. Not thread-safe: one owner (the engine's worker thread).
#include <cstddef>
#include <optional>
#include <vector>

#include "actors/worker/completion_stamper.hpp"
#include "proto/completion.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "proto/step_report.hpp"

namespace kvc::worker {

class report_sequencer {
 public:
  report_sequencer(rank_id rank, uint32_t incarnation) : stamper_(rank, incarnation) {}

  /// A step's metadata was bound. errc::precondition_failed while a step is open,
  /// errc::invalid_argument unless `step` is above every step opened before; nothing changes on
  /// error.
  status open(step_id step);
  /// Results of one get_finished call. The open step's report if it has not gone out yet
  /// (everything held so far plus `jobs`), otherwise std::nullopt and the results are held.
  std::optional<step_report> add(std::vector<rank_job_result> jobs);
  /// The open step ends: its report if it has not gone out yet (with the held results);
  /// std::nullopt when no step is open or its report went out already.
  std::optional<step_report> close();

  bool is_open() const noexcept { return open_.has_value(); }
  std::optional<step_id> last_step() const noexcept { return last_; }
  /// The sequence number of the next event.
  uint64_t next_seq() const noexcept { return stamper_.next_seq(); }
  /// Results waiting for the next report.
  size_t held() const noexcept { return held_.size(); }

 private:
  step_report release(step_id step);

  std::optional<step_id> open_;
  std::optional<step_id> last_;
  bool sent_ = false;
  std::vector<rank_job_result> held_;
  completion_stamper stamper_;
};

}  // namespace kvc::worker
