#pragma once
/// step_runner: executes each step's connector_metadata on a connector_worker as soon as it
/// arrives and decides when the step's completion report goes out. It is the pure core of the
/// worker actor's *execute* mode (a standalone worker process, no forward pass to interleave
/// with); when an engine drives the per-step calls itself, the actor relays instead.
///
/// A step runs to the end at once: bind, handle_preemptions, start_load_kv, wait_for_save, then
/// the queued stores are submitted right away (the deferral to the next step only matters when a
/// forward pass runs in between), and the metadata is cleared. The step stays *open* until none
/// of the worker's transfers is in flight; then its report closes it. The coordinator releases a
/// step's output once every rank closed the step, so waiting for the transfers puts a step's own
/// jobs into that step's output. If the next metadata arrives first, the open step is closed with
/// what finished so far and the rest is reported, stamped with the later step, when it finishes.
///
/// Reports. Exactly one report per step, in step order (the coordinator's protocol); events are
/// stamped with the open step and numbered by a completion_stamper. A metadata the worker refuses
/// (a repeated job id) still opens and closes its step, so the barrier never stalls; its jobs
/// are not reported and fail at the coordinator's deadline.
///
/// Failed loads' GPU block ids are drained every poll and only counted: the job results already
/// say which loads failed, and the scheduler derives the invalid blocks from them.
///
/// Borrows the connector_worker (owned with its engine by the caller). Pure: no CAF, no threads,
/// no clock; never blocks except inside connector_worker::handle_preemptions (flush jobs).
/// Not thread-safe: one owner.
#include <cstdint>
#include <optional>
#include <vector>

#include "actors/worker/completion_stamper.hpp"
#include "actors/worker/connector_worker.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"

namespace kvc::worker {

/// One report to the coordinator: everything observed in `step`, closing it.
struct step_report {
  step_id step = 0;
  std::vector<completion_event> events;

  friend bool operator==(const step_report&, const step_report&) = default;
};

class step_runner {
 public:
  step_runner(connector_worker& worker, rank_id rank, uint32_t incarnation)
      : worker_(&worker), stamper_(rank, incarnation) {}

  /// Runs `meta` (see the file comment). Appends to `reports` the previous open step's report,
  /// then this step's if nothing of it is in flight. errc::invalid_argument, nothing changed and
  /// nothing appended, when meta.step is not above the last step. Otherwise the step always
  /// opens; the first error of the worker's calls is returned (and logged by the caller).
  status execute(const connector_metadata& meta, std::vector<step_report>& reports);

  /// Collects finished transfers; the open step's report once none is in flight. std::nullopt
  /// while transfers are in flight or when no step is open.
  std::optional<step_report> poll();

  /// A step waits for its transfers: call poll() again later.
  bool step_open() const noexcept { return open_.has_value(); }
  std::optional<step_id> last_step() const noexcept { return last_; }
  uint64_t next_seq() const noexcept { return stamper_.next_seq(); }
  /// GPU blocks of failed loads seen so far.
  uint64_t load_error_blocks() const noexcept { return load_error_blocks_; }

 private:
  void collect();
  step_report close();

  connector_worker* worker_;
  completion_stamper stamper_;
  std::optional<step_id> open_;
  std::optional<step_id> last_;
  std::vector<completion_event> pending_;
  uint64_t load_error_blocks_ = 0;
};

}  // namespace kvc::worker
