#pragma once
/// trace_summary: where a step's time went, from a run's trace records (trace_file.hpp), for
/// `kvconnect trace summary`.
///
/// A step's round trip runs from the scheduler sending its metadata (the first send) to the
/// step's aggregated output applied (the end of its output_applied span), on the reference
/// clock (clock_offsets.hpp). Per rank it splits into phases:
///   delivery  metadata sent by the scheduler -> received by the rank
///   handling  received by the rank -> the rank's report sent (binding, transfers, get_finished)
///   return    report sent -> received by the scheduler
/// and, per step, aggregate: the last report received -> the output applied (the coordinator
/// and the planner). Steps whose output was never applied (the run ended first) are left out.
///
/// Pure; thread-safe.
#include <cstdint>
#include <string>
#include <vector>

#include "launch/trace/trace_file.hpp"

namespace kvc::launch {

struct rank_phases {
  int64_t rank = 0;
  int64_t delivery_ns = 0;
  int64_t handling_ns = 0;
  int64_t return_ns = 0;
};

struct step_summary {
  int64_t step = 0;
  int64_t total_ns = 0;            ///< metadata sent -> output applied
  int64_t aggregate_ns = 0;        ///< last report received -> output applied
  int64_t last_rank = -1;          ///< whose report arrived last
  std::vector<rank_phases> ranks;  ///< ranks seen at all four points, by rank
};

struct percentiles {
  int64_t p50_ns = 0;
  int64_t p99_ns = 0;
  int64_t max_ns = 0;
};

struct rank_standing {
  int64_t rank = 0;
  int64_t mean_ns = 0;      ///< mean of delivery + handling + return
  uint64_t last_count = 0;  ///< steps in which its report was the last to arrive
};

struct run_summary {
  std::vector<step_summary> steps;                        ///< by step
  percentiles total, delivery, handling, ret, aggregate;  ///< over steps (phases: worst rank)
  std::vector<rank_standing> slowest;                     ///< slowest first
};

run_summary summarize_steps(const trace_set& set);

/// The summary as text: one line per step, then p50/p99/max per phase, then the ranks.
std::string format_summary(const run_summary& s);

/// One request's path across the processes, in time order: the records of its jobs (planned,
/// taken on, completed, applied at the scheduler) and of the messages of the steps those jobs
/// were planned and completed in. Needs a trace recorded at level `jobs` (only jobs carry
/// request ids); errc::not_found when no record names the request.
result<std::string> request_path(const trace_set& set, const std::string& request);

}  // namespace kvc::launch
