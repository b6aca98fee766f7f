#pragma once
/// recording_core: the run record's decorator at the coordinator's core (step_core.hpp). Every
/// input is written into the record right before the wrapped core consumes it (expects,
/// reports, rank events, ticks) and every poll with what it answered, so the record holds the
/// core's input sequence in the order the core saw it, wherever the coordinator actor took it
/// from. The coordinator actor holds it as its step_core and never names the record.
///
/// Owns the wrapped core; shares the recorder with the scheduler facade's record observer,
/// which writes the engine's calls into the same file. Not thread-safe: the coordinator actor's
/// thread calls everything.
#include <memory>

#include "actors/coordinator/step_core.hpp"
#include "actors/record/recorder.hpp"

namespace kvc::record {

class recording_core final : public coordinator::step_core {
 public:
  recording_core(std::unique_ptr<coordinator::step_core> target, std::shared_ptr<recorder> rec)
      : target_(std::move(target)), rec_(std::move(rec)) {}

  void report(const step_report& r) override;
  void expect(const connector_metadata& meta, uint64_t now) override;
  void rank_up(rank_id rank, uint32_t incarnation) override;
  void rank_down(rank_id rank) override;
  void tick(uint64_t now) override;
  /// Not written: the engine's request output that completed the jobs is in the record
  /// (record_observer), and the replayer forgets what the planner completed from it, as the
  /// facade does (apply_job_results, the other source, is refused while recording).
  void forget_jobs(std::span<const job_id> jobs) override { target_->forget_jobs(jobs); }
  std::optional<connector_output> poll_output() override;

  bool needs_tick() const noexcept override { return target_->needs_tick(); }
  std::vector<coordinator::coordinator_note> take_notes() override { return target_->take_notes(); }
  const coordinator::step_coordinator& state() const noexcept override { return target_->state(); }

 private:
  std::unique_ptr<coordinator::step_core> target_;
  std::shared_ptr<recorder> rec_;
};

}  // namespace kvc::record
