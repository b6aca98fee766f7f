#pragma once
/// run_report: what a simulated-engine run measured, and its summary JSON line
/// ({"event":"summary",...}, docs/config.md) and human table. The counts are deterministic for
/// a seed on the deterministic copy engine; the timings (step_*_us, *_gbps, connector_share,
/// wall_seconds) are wall-clock measurements and are not.
///
/// Plain data; the functions are pure.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/config/fault_report.hpp"
#include "launch/engines/sim/finished_request.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::sim {

/// What the file tier (offload.secondary_tiers) did in a run: the planner's counters and the
/// bytes of its completed jobs over every rank. Deterministic for a seed (every rank finishes
/// its tier jobs in their step).
struct tier_figures {
  uint64_t queries = 0;  ///< lookups of blocks the pool missed (vLLM's chunk queries)
  uint64_t hits = 0;
  uint64_t asked_again = 0;  ///< "ask again" answers while files were checked or promoted
  uint64_t cascaded_blocks = 0;
  uint64_t cascades_failed = 0;
  uint64_t cascades_skipped = 0;  ///< back-pressure or no room
  uint64_t promoted_blocks = 0;
  uint64_t promotions_failed = 0;
  uint64_t evictions = 0;      ///< blocks evicted for capacity_bytes
  uint64_t bytes_written = 0;  ///< over every rank
  uint64_t bytes_read = 0;
  friend bool operator==(const tier_figures&, const tier_figures&) = default;
};

struct run_report {
  bool offload = true;
  /// The run had a file tier: its figures (the summary's "file_tier").
  std::optional<tier_figures> file_tier;
  uint64_t steps = 0;
  uint64_t requests_arrived = 0;
  uint64_t requests_finished = 0;
  uint64_t requests_aborted = 0;  ///< unfinished at the drain's bound (workload.drain_steps)
  uint64_t preemptions = 0;
  uint64_t gpu_hit_tokens = 0;
  uint64_t cpu_hit_tokens = 0;
  uint64_t prefill_tokens_computed = 0;
  uint64_t prefill_tokens_saved = 0;  ///< prompt tokens not computed thanks to the CPU pool
  uint64_t output_tokens = 0;  ///< of the finished requests
  /// Offloaded blocks' worth of bytes_stored / bytes_loaded (a load that starts inside an
  /// offloaded block, after GPU prefix-cache hits, moves part of it).
  uint64_t blocks_stored = 0;
  uint64_t blocks_loaded = 0;
  uint64_t bytes_stored = 0;   ///< over every rank
  uint64_t bytes_loaded = 0;
  uint64_t jobs_failed = 0;
  uint64_t loads_verified = 0;  ///< GPU blocks checked byte for byte after a load, every rank
  uint64_t load_mismatches = 0;
  uint64_t step_errors = 0;      ///< connector calls of the ranks that failed
  uint64_t hung_requests = 0;    ///< not released when the drain ended
  uint64_t pending_jobs = 0;     ///< planned and not completed at the end (pins or pending slots)
  uint64_t rank_jobs_known = 0;  ///< jobs bound on a rank and never reported
  uint64_t busy_slots = 0;       ///< CPU slots neither free nor idle at the end (leaked pins)
  uint64_t double_completions = 0;   ///< job results applied more than once
  /// Requests whose failed load or a GPU cache reset left computed tokens to recompute.
  uint64_t requests_recomputed = 0;
  uint64_t gpu_cache_resets = 0;  ///< a restarted rank's GPU KV forgotten (sim_scheduler)
  // Injected faults (in-process runs with a fault config; docs/faults.md).
  fault_counts faults_fired{};        ///< channel faults of the scheduler's end + copy faults
  uint64_t late_reports_dropped = 0;  ///< reports after their job's deadline
  uint64_t duplicates_dropped = 0;    ///< duplicate reports
  uint64_t restarts = 0;
  double sim_seconds = 0;  ///< simulated time of the run
  double ttft_p50_ms = 0;  ///< simulated, over the finished requests
  double ttft_p99_ms = 0;
  double output_tokens_per_s = 0;     ///< simulated: output_tokens / sim_seconds
  std::vector<std::string> problems;  ///< protocol errors and mismatches, described
  /// Every finished request (what a comparison pairs; not in the summary line).
  std::vector<finished_request> finished;

  // Wall-clock timings (not deterministic).
  double step_p50_us = 0;
  double step_p99_us = 0;
  /// Connector wall time of the run (the scheduler's calls, and the ranks' where they run in
  /// this process), ns.
  double connector_ns = 0;
  /// Connector wall time (the facades' calls, without the copies) / simulated time, over the run.
  double connector_share = 0;
  /// In-process runs: wall time of the copies (run on the step's thread by finish_transfers)
  /// / simulated time.
  double copy_share = 0;
  double store_gbps = 0;
  double load_gbps = 0;
  double wall_seconds = 0;

  /// Zero mismatches, nothing hung or pending, no protocol error.
  bool ok() const noexcept;
};

/// What the fault report says of a run: the soak's, and the scheduler process's of a launch
/// (whose launcher adds its workers' load checks): one source for the summary's counts and the
/// report's invariants.
launch::fault_outcome fault_outcome_of(const run_report& r, uint64_t seed);

/// The deterministic part as JSON (what two runs of one seed must agree on).
nlohmann::json counts_json(const run_report& r);
/// {"event":"summary", ...}: every field of the summary line and the rest.
nlohmann::json summary_json(const run_report& r);
/// The human table (several lines).
std::string summary_table(const run_report& r);

/// The summaries' rounding of a figure: 3 decimals.
double round3(double v);
/// One line of a human table: "  name<padded to 26> value\n".
std::string table_line(const char* name, const std::string& value);
/// A figure with 3 decimals, for the tables.
std::string fixed3(double v);

/// The p-th percentile (0..100) by nearest rank; 0 for no values. Sorts `v`.
double percentile(std::vector<double>& v, double p);

}  // namespace kvc::sim
