#pragma once
/// scheduler_metrics: the scheduler process's metrics. Counting happens where the events happen,
/// as plain integers in the pure classes (planner's connector_stats, the coordinator's
/// aggregator_stats, the manager's reuse-filter count); this class adds what only the step's
/// flow shows: per-direction transfer bytes, time and sizes from the applied job results, the
/// blocks per store allocation, and each step's round trip (metadata sent -> its output applied,
/// times passed in by the caller), and the file tier's job results (bytes, time, failures).
/// sample() copies all of it into a scheduler_sample, a plain
/// value the engine thread publishes for the /metrics thread; render() turns a sample into
/// Prometheus text (docs/observability.md lists the series).
///
/// Pure: no clock (now is passed in, nanoseconds on the caller's monotonic clock), no I/O.
/// Not thread-safe: the engine's scheduler thread owns it; samples are values and travel.
#include <cstdint>
#include <array>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/coordinator/completion_aggregator.hpp"
#include "actors/metrics/histogram.hpp"
#include "actors/scheduler/planner.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"

namespace kvc::metrics {

/// Transfers of one direction (load: CPU->GPU, store: GPU->CPU), successful jobs only.
struct transfer_totals {
  uint64_t bytes = 0;
  double seconds = 0.0;  ///< sum over jobs of the slowest rank's copy time
  histogram size;        ///< bytes per job
};

/// The file tier's promotions (reads) and cascades (writes) as their job results tell: bytes
/// summed over the ranks (each rank's KV payload, no file header), the slowest rank's seconds.
struct tier_job_totals {
  uint64_t read_bytes = 0;  ///< successful promotions
  double read_seconds = 0.0;
  uint64_t write_bytes = 0;  ///< successful cascades
  double write_seconds = 0.0;
  uint64_t promotion_failures = 0;  ///< failed promotion jobs (vLLM counts jobs, not blocks)
  uint64_t cascade_failures = 0;    ///< failed cascade jobs
};

/// What the scheduler process knows at one instant.
struct scheduler_sample {
  scheduler::connector_stats planner;
  coordinator::aggregator_stats coordinator;
  uint64_t stores_skipped = 0;  ///< blocks the reuse filter kept out of the pool
  uint32_t pool_capacity = 0;   ///< CPU slots (per rank; every rank has the same)
  uint32_t pool_used = 0;       ///< slots holding a block (ready or being stored)
  uint64_t jobs_in_flight = 0;
  uint32_t world_size = 0;
  uint32_t ranks_alive = 0;     ///< ranks registered and connected on the step channel
  uint64_t frames_dropped = 0;  ///< step-channel frames refused (bad, stale, unroutable)
  transfer_totals load;
  transfer_totals store;
  histogram allocation_size;  ///< blocks per store job
  histogram step_round_trip;  ///< seconds from metadata sent to the step's output applied
  uint64_t steps_sent = 0;
  uint64_t steps_applied = 0;
  /// Faults fired, by kind (the fault plan's names); empty while none fired.
  std::vector<std::pair<std::string, uint64_t>> faults_fired;
  /// Failed jobs applied, by their errc (index: the code's value).
  std::array<uint64_t, errc_count> failures_by_error{};
  /// The file tier's counters; std::nullopt without a tier (its series are then left out).
  std::optional<scheduler::file_tier_counters> file_tier;
  tier_job_totals tier_jobs;
};

/// The sources sample() reads, borrowed for the call.
struct scheduler_sources {
  const scheduler::connector_stats* planner = nullptr;
  const coordinator::aggregator_stats* coordinator = nullptr;
  uint64_t stores_skipped = 0;
  uint32_t pool_capacity = 0;
  uint32_t pool_used = 0;
  uint64_t jobs_in_flight = 0;
  uint32_t world_size = 0;
  uint32_t ranks_alive = 0;
  uint64_t frames_dropped = 0;
  /// Faults fired in this process, by kind (fault_kind's names); kinds that never fired are left out.
  std::vector<std::pair<std::string, uint64_t>> faults_fired;
  /// The planner's file tier counters; null without a tier.
  const scheduler::file_tier_counters* file_tier = nullptr;
};

class scheduler_metrics {
 public:
  /// Steps whose send time is remembered while their output is outstanding; older ones are
  /// forgotten (their round trip is not observed).
  static constexpr size_t max_open_steps = 4096;

  scheduler_metrics();

  /// The step's metadata went to the ranks at `now`.
  void on_step_sent(const connector_metadata& meta, uint64_t now);
  /// The output of `out.step` (and of every earlier step still open) was applied at `now`.
  /// `settled`: the planner's settled_results_dropped() for it: a load the engine's sets
  /// settled counts as they settled it (its bytes if ok, as its ranks reported them; failed
  /// without them), whatever the coordinator's result says.
  void on_output_applied(const connector_output& out, uint64_t now,
                         std::span<const scheduler::settled_result> settled = {});

  scheduler_sample sample(const scheduler_sources& src) const;

 private:
  void count_tier_job(const job_result& r);

  transfer_totals load_;
  transfer_totals store_;
  tier_job_totals tier_jobs_;
  histogram allocation_size_;
  histogram round_trip_;
  std::deque<std::pair<step_id, uint64_t>> open_steps_;  // step, sent at
  std::array<uint64_t, errc_count> failures_by_error_{};
  uint64_t steps_sent_ = 0;
  uint64_t steps_applied_ = 0;
};

/// Bucket bounds: vLLM's for transfer sizes (bytes) and allocation sizes (blocks); ours for
/// the step round trip (seconds, 100 us .. 10 s).
std::vector<double> transfer_size_bounds();
std::vector<double> allocation_size_bounds();
std::vector<double> round_trip_bounds();

/// The tier label of the file tier's series: vLLM's "<index>:<type>", the pool being tier 0.
inline constexpr std::string_view file_tier_label = "1:fs";

/// The sample as Prometheus text: vLLM's offload series (both the deprecated transfer_type
/// ones and the store/load ones), with a file tier vLLM's tiering series (label tier), then
/// kvconnect_* series.
std::string render(const scheduler_sample& s);

}  // namespace kvc::metrics
