#pragma once
/// run_comparison: a run with offloading against the same workload without it (`kvconnect soak
/// --compare`, `kvconnect launch --compare`), over the same requests. Only the requests that
/// finished in both runs count (paired by id): a request aborted at the drain's bound of one
/// run, or a follow-up turn that arrived in one run only, is left out of every figure and ratio,
/// so the two sides always describe the same prompts and the same output tokens.
///
/// Over those requests, each run's figures: prefill tokens computed, TTFT p50, and the
/// simulated time until the last of them finished, with output tokens / that time as the
/// throughput. (Both sides produce the same output tokens, so throughput_ratio and
/// sim_time_ratio agree; both are kept for the summary lines' readers.)
///
/// Pure functions over plain data.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/engines/sim/finished_request.hpp"
#include "launch/engines/sim/run_report.hpp"
#include "proto/status.hpp"

namespace kvc::sim {

/// What one run did for the compared requests.
struct compared_figures {
  uint64_t prefill_tokens_computed = 0;
  uint64_t output_tokens = 0;
  double ttft_p50_ms = 0;
  double sim_seconds = 0;  ///< from the run's start until the last of them finished
  double output_tokens_per_s = 0;
  friend bool operator==(const compared_figures&, const compared_figures&) = default;
};

struct run_comparison {
  uint64_t requests = 0;  ///< finished in both runs
  compared_figures on;
  compared_figures off;
};

/// The requests finished in both runs (by id) and each run's figures over them.
run_comparison compare_finished(std::span<const finished_request> on,
                                std::span<const finished_request> off);

/// {"event":"compare"}: both summaries (offload_on, offload_off), requests_compared, the
/// figures over those requests (compared_on, compared_off), and over them
/// prefill_tokens_saved (off − on), ttft_p50_ratio (off / on), throughput_ratio (on / off) and
/// sim_time_ratio (off / on); a ratio with nothing to divide by is 0.
nlohmann::json compare_json(const nlohmann::json& on_summary, const nlohmann::json& off_summary,
                            const run_comparison& c);
/// The same as lines for a human (each run's requests_finished read from its summary).
std::string compare_table(const nlohmann::json& on_summary, const nlohmann::json& off_summary,
                          const run_comparison& c);
/// Both for two reports of this process (`kvconnect soak --compare`).
nlohmann::json compare_json(const run_report& on, const run_report& off);
std::string compare_table(const run_report& on, const run_report& off);

/// {"event":"compare_tier"}: a run with the file tier against the same workload with the CPU
/// pool alone, over the requests finished in both: the pool-only summary (pool_only),
/// requests_compared, each run's figures (compared_tier, compared_pool_only) and
/// prefill_tokens_saved_by_tier (pool only − with the tier), ttft_p50_ratio (pool only / tier).
nlohmann::json compare_tier_json(const run_report& with_tier, const run_report& pool_only);
/// The same as lines for a human.
std::string compare_tier_table(const run_report& with_tier, const run_report& pool_only);

/// {"event":"finished","requests":[[id, arrival_us, first_token_us, finish_us, output_tokens,
/// prefill_tokens], ...]}: a run's finished requests for a comparison in another process (the
/// scheduler process prints it before its "sim" line; `kvconnect launch --compare` reads it).
nlohmann::json finished_json(std::span<const finished_request> finished);
/// finished_json's line read back; errc::invalid_argument naming the first entry that is not
/// one (a wrong shape, a negative or non-number figure, an id given twice).
result<std::vector<finished_request>> finished_from_json(const nlohmann::json& line);

}  // namespace kvc::sim
