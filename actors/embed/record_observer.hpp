#pragma once
/// record_observer: the run record (observe.record; actors/record/, docs/observability.md) as
/// an observer of the scheduler facade. start() opens `<record_dir>/scheduler-<pid>.kvcrec`
/// and puts record::recording_core around the coordinator's core, which records the core's
/// inputs; this observer records the engine's calls with the planner's answers into the same
/// file, and closes it at on_stopped. Job results from outside the step channel are refused
/// while recording (a record replays the coordinator's results only).
///
/// Shares the recorder with the decorator, so the file outlives whichever goes last. Not
/// thread-safe: the engine's scheduler thread.
#include <memory>

#include "actors/coordinator/blocking_coordinator.hpp"
#include "actors/embed/embed_config.hpp"
#include "actors/embed/step_observer.hpp"
#include "actors/record/recorder.hpp"

namespace kvc::embed {

class record_observer final : public step_observer {
 public:
  /// Creates the record directory when it is missing (0700) and the record (0600), and wraps
  /// `coord`'s core. `cfg.planner` is the planner's config as built. Errors: the directory's or
  /// the file's (errc::io_error naming it).
  static result<std::unique_ptr<record_observer>> start(const scheduler_connector_config& cfg,
                                                        coordinator::blocking_coordinator& coord);

  void on_match(const scheduler::request_view& req, uint32_t num_computed,
                const scheduler::match_result& answer) override {
    rec_->match(req, num_computed, answer);
  }
  void on_alloc(const scheduler::request_view& req, std::span<const gpu_block> block_ids,
                uint32_t num_external, bool ok) override {
    rec_->alloc(req, block_ids, num_external, ok);
  }
  void on_alloc_table(const scheduler::request_view& req, const scheduler::block_table_view& blocks,
                      uint32_t num_external, bool ok) override {
    rec_->alloc(req, blocks, num_external, ok);
  }
  void on_request_output(const scheduler::request_output& out) override {
    rec_->request_output(out);
  }
  void on_request_finished(std::string_view req_id, bool delay_free) override {
    rec_->finished(req_id, delay_free);
  }
  void on_step_built(const scheduler::step_input& in, const connector_metadata* meta) override {
    rec_->build(in, meta);
  }
  void on_completions_taken() override { rec_->take_completions(); }
  void on_reset(bool ok, step_id /*last_step*/) override { rec_->reset(ok); }
  status admit_outside_results() override;
  /// Closes the record; a write error is logged.
  void on_stopped() override;

 private:
  explicit record_observer(std::shared_ptr<record::recorder> rec) : rec_(std::move(rec)) {}
  std::shared_ptr<record::recorder> rec_;
};

}  // namespace kvc::embed
