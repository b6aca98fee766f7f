#pragma once
/// The fault report: one JSON line that a run with injected faults ends with (`kvconnect soak`,
/// `kvconnect scheduler --fault ...`; docs/faults.md), and whether the run kept its invariants.
/// Pure functions; thread-safe.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "proto/fault_plan.hpp"

namespace kvc::launch {

/// What a run with faults counted. The last five must be 0 for the invariants to hold.
struct fault_outcome {
  uint64_t seed = 0;
  fault_counts fired{};         ///< injected faults by kind
  uint64_t jobs_failed = 0;     ///< job results that said failed (any cause)
  uint64_t jobs_recovered = 0;  ///< failed jobs whose work was redone (recomputed, stored again)
  uint64_t requests_recomputed = 0;  ///< requests that recomputed blocks a failed load left invalid
  uint64_t late_reports_dropped = 0;  ///< reports after their job's deadline
  uint64_t duplicates_dropped = 0;    ///< duplicate reports
  uint64_t hung_requests = 0;         ///< requests still waiting at the end
  uint64_t leaked_slots = 0;          ///< CPU slots neither free nor idle at the end
  uint64_t pending_jobs = 0;          ///< jobs without a result at the end
  uint64_t load_mismatches = 0;       ///< successful loads whose bytes differ from the store
  uint64_t double_completions = 0;    ///< jobs that got more than one result
  friend bool operator==(const fault_outcome&, const fault_outcome&) = default;
};

/// True when nothing hung, leaked, stayed pending, mismatched or completed twice.
bool invariants_ok(const fault_outcome& o) noexcept;

/// The same of a fault report line (fault_report_line's keys; a missing count is 0), also false
/// when it says `"workers_exited_on_their_own":false` (the launcher's, after kill_scheduler).
bool invariants_ok(const nlohmann::json& report);

/// A launch's fault report takes its invariant counts from the launch's summary, the one source
/// of both lines: hung_requests, pending_jobs, double_completions, load_mismatches (every
/// worker's) and leaked_slots (the summary's busy_slots), those the summary has; then
/// invariants_ok is recomputed. A run that ends with hung requests never reports its
/// invariants as kept.
void take_invariants(nlohmann::json& report, const nlohmann::json& summary);

/// `{"event":"fault_report","seed":S,"fired":{"drop_report":n,... every kind},"jobs_failed":...,
/// "invariants_ok":true}` on one line (no newline). Keys in a fixed order: the same outcome
/// gives the same bytes.
std::string fault_report_line(const fault_outcome& o);

/// The exit code a run reports: 3 when an invariant failed, else `otherwise`.
int fault_report_exit_code(const fault_outcome& o, int otherwise) noexcept;

}  // namespace kvc::launch
