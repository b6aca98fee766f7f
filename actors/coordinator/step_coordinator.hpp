#pragma once
/// step_coordinator: what the coordinator role does with each of its inputs, on top of
/// completion_aggregator: turns the job timeout into deadlines, logs rejected reports and
/// refused calls (spdlog), and hands out released step outputs. Both hosts of the coordinator
/// role use it: the coordinator actor (CAF data plane) and the engine thread's ZeroMQ data
/// plane (embed/engine_data_plane.hpp), so the two apply identical rules.
///
/// Pure apart from logging: no CAF, no threads, no clock (callers pass `now`, nanoseconds on
/// their monotonic clock). Not thread-safe: one owner.
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "actors/coordinator/completion_aggregator.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"

namespace kvc::coordinator {

class step_coordinator {
 public:
  /// `job_timeout` 0: jobs never time out. Errors: completion_aggregator::create's, and
  /// invalid_argument for a negative timeout.
  static result<step_coordinator> create(const aggregator_config& cfg,
                                         std::chrono::nanoseconds job_timeout);

  /// A rank's reports of one step; closes the step for the rank.
  void report(rank_id rank, uint32_t incarnation, step_id step,
              std::span<const completion_event> events);
  /// The scheduler planned these jobs in `step` at time `now`.
  void expect(step_id step, std::span<const job_id> loads, std::span<const job_id> stores,
              uint64_t now);
  /// expect() for every job of a step's metadata.
  void expect(const connector_metadata& meta, uint64_t now);
  void rank_up(rank_id rank, uint32_t incarnation);
  void rank_down(rank_id rank);
  /// Deadlines and grace periods up to `now`.
  void tick(uint64_t now);

  /// The next released step output (completion_aggregator::poll_output).
  std::optional<connector_output> poll_output() { return agg_.poll_output(); }
  bool needs_tick() const noexcept { return agg_.needs_expire(); }
  const completion_aggregator& aggregator() const noexcept { return agg_; }

 private:
  step_coordinator(completion_aggregator agg, std::chrono::nanoseconds job_timeout)
      : agg_(std::move(agg)), job_timeout_(job_timeout) {}
  /// now + job timeout; none when jobs never time out.
  std::optional<uint64_t> deadline_from(uint64_t now) const noexcept;
  void expect_one(job_id job, transfer_kind kind, step_id step, std::optional<uint64_t> deadline);

  completion_aggregator agg_;
  std::chrono::nanoseconds job_timeout_;
};

}  // namespace kvc::coordinator
