#pragma once
/// trace_observer: the scheduler facade's records in the process's trace (observe.trace, not
/// off; docs/observability.md). At level messages and above: one span per build_connector_meta
/// and per step output applied (`value`: the planner's jobs in flight). At level jobs also a
/// "pool_slots" record beside each span (`value`: the CPU pool's slots in use, `bytes`: its
/// capacity) and one record per job planned (with its request) and per job result applied: a
/// GPU transfer's on the "scheduler" track, a file tier job's on its kind's own track
/// (trace::tier_track: "tier promotion", "tier cascade", "tier check").
///
/// Shares the process's tracer with the scheduler host; gives its share up at on_stopped (the
/// last owner completes the trace file). Not thread-safe: the engine's scheduler thread.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "actors/embed/step_observer.hpp"
#include "actors/trace/tracer.hpp"

namespace kvc::embed {

class trace_observer final : public step_observer {
 public:
  /// `slot_bytes`: the pool's bytes per slot (a planned job's bytes).
  trace_observer(std::shared_ptr<trace::tracer> tracer, const scheduler::planner& planner,
                 uint64_t slot_bytes)
      : tracer_(std::move(tracer)), planner_(planner), slot_bytes_(slot_bytes) {}

  void on_step_built(const scheduler::step_input& in, const connector_metadata* meta) override;
  void on_step_sent(const connector_metadata& meta, int64_t started) override;
  void on_output_applied(const connector_output& out, int64_t started) override;
  /// A reset that emptied the pool: a "reset_cache" record at the last step sent.
  void on_reset(bool ok, step_id last_step) override;
  void on_stopped() override { tracer_.reset(); }

 private:
  /// One scheduler-side span from `started` to `end`, and at level jobs the pool's record
  /// beside it.
  void span(const char* type, step_id step, int64_t started, int64_t end);
  void job(const char* type, step_id step, job_id id, const std::string& request, uint64_t bytes,
           std::string note, std::string track = "scheduler");

  std::shared_ptr<trace::tracer> tracer_;  // null after on_stopped
  const scheduler::planner& planner_;
  uint64_t slot_bytes_;
};

}  // namespace kvc::embed
