#pragma once
/// step_observer: what watches the scheduler facade (scheduler_connector) without changing what
/// it answers: the tracer (trace_observer), the run recorder (record_observer), the metrics
/// (metrics_observer) and the KV-event publisher (kv_event_observer). The facade holds one list
/// of them, built from observe.* at create(), and calls each in turn at each of its events; it
/// never branches on which it holds. Every method has an empty default: an observer overrides
/// the events it needs.
///
/// The events come once per engine call, step or step output, never once per block. An
/// observer must not change the planner's or the coordinator's decisions: with the observers
/// on or off the facade's answers, the metadata and the job results are the same (the parity
/// tests: tests/launch/observer_parity_test.cpp, and the embed test
/// EveryObserverOnOrOffGivesTheEngineTheSameAnswers). Its own failures are logged, not returned;
/// admit_outside_results is the one event whose answer the facade acts on.
///
/// Internal to actors/embed (not installed). Not thread-safe: the engine's scheduler thread
/// calls everything.
#include <cstdint>
#include <span>
#include <string_view>

#include "actors/scheduler/planner.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

class step_observer {
 public:
  virtual ~step_observer() = default;

  // --- the engine's calls, with what the planner answered ---
  virtual void on_match(const scheduler::request_view& /*req*/, uint32_t /*num_computed*/,
                        const scheduler::match_result& /*answer*/) {}
  virtual void on_alloc(const scheduler::request_view& /*req*/,
                        std::span<const gpu_block> /*block_ids*/, uint32_t /*num_external*/,
                        bool /*ok*/) {}
  virtual void on_alloc_table(const scheduler::request_view& /*req*/,
                              const scheduler::block_table_view& /*blocks*/,
                              uint32_t /*num_external*/, bool /*ok*/) {}
  virtual void on_request_output(const scheduler::request_output& /*out*/) {}
  virtual void on_request_finished(std::string_view /*req_id*/, bool /*delay_free*/) {}

  // --- a step ---
  /// The planner built step in.step: `meta`, or null when it refused the step. Called before
  /// the metadata goes to the ranks.
  virtual void on_step_built(const scheduler::step_input& /*in*/,
                             const connector_metadata* /*meta*/) {}
  /// The step's metadata went to the ranks. `started`: when build_connector_meta began
  /// (trace::tracer::mono_now()).
  virtual void on_step_sent(const connector_metadata& /*meta*/, int64_t /*started*/) {}
  /// A step output from the coordinator was applied to the planner; `started`: when its
  /// application began.
  virtual void on_output_applied(const connector_output& /*out*/, int64_t /*started*/) {}
  /// update_connector_output is about to hand the engine the request completions.
  virtual void on_completions_taken() {}
  /// The end of a call that applied outputs or outcomes (update_connector_output,
  /// apply_request_output, apply_job_results).
  virtual void on_call_end() {}
  /// reset_cache is about to empty the CPU pool: what happened before it goes out first.
  virtual void on_reset_requested() {}
  /// reset_cache's answer: `ok` when the pool was emptied, false when the planner refused
  /// (mid-step); `last_step` the last step sent (0 before the first).
  virtual void on_reset(bool /*ok*/, step_id /*last_step*/) {}

  // --- questions the facade asks ---
  /// Job results from outside the step channel (apply_job_results) are about to be applied;
  /// an error refuses them, and the facade returns it.
  virtual status admit_outside_results() { return status::success(); }
  /// True when this observer takes the planner's KV events itself (take_events hands out none).
  virtual bool takes_kv_events() const noexcept { return false; }

  // --- shutdown ---
  /// Before the actors stop: the last look at what they hold.
  virtual void on_stopping() {}
  /// After the actors stopped: complete the output (files, final events, last sample).
  virtual void on_stopped() {}
};

}  // namespace kvc::embed
