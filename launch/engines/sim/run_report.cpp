#include "launch/engines/sim/run_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kvc::sim {

double round3(double v) {
  return std::round(v * 1000) / 1000;
}

std::string table_line(const char* name, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-26s %s\n", name, value.c_str());
  return buf;
}

std::string fixed3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

bool run_report::ok() const noexcept {
  return load_mismatches == 0 && hung_requests == 0 && pending_jobs == 0 && rank_jobs_known == 0 &&
         busy_slots == 0 && double_completions == 0 && problems.empty();
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

launch::fault_outcome fault_outcome_of(const run_report& r, uint64_t seed) {
  launch::fault_outcome o;
  o.seed = seed;
  o.fired = r.faults_fired;
  o.jobs_failed = r.jobs_failed;
  // A failed load's request recomputes what the load did not bring: that redoes the job's work.
  // A failed store is not retried (its blocks stay on the GPU; a later step may offer them).
  o.jobs_recovered = r.requests_recomputed;
  o.requests_recomputed = r.requests_recomputed;
  o.late_reports_dropped = r.late_reports_dropped;
  o.duplicates_dropped = r.duplicates_dropped;
  o.hung_requests = r.hung_requests;
  o.leaked_slots = r.busy_slots;
  o.pending_jobs = r.pending_jobs;
  o.load_mismatches = r.load_mismatches;
  o.double_completions = r.double_completions;
  return o;
}

namespace {

nlohmann::json tier_json(const tier_figures& t) {
  return {{"queries", t.queries},
          {"hits", t.hits},
          {"asked_again", t.asked_again},
          {"cascaded_blocks", t.cascaded_blocks},
          {"cascades_failed", t.cascades_failed},
          {"cascades_skipped", t.cascades_skipped},
          {"promoted_blocks", t.promoted_blocks},
          {"promotions_failed", t.promotions_failed},
          {"evictions", t.evictions},
          {"bytes_written", t.bytes_written},
          {"bytes_read", t.bytes_read}};
}

nlohmann::json counts_without_tier(const run_report& r) {
  return {{"offload", r.offload},
          {"steps", r.steps},
          {"requests_arrived", r.requests_arrived},
          {"requests_finished", r.requests_finished},
          {"requests_aborted", r.requests_aborted},
          {"preemptions", r.preemptions},
          {"gpu_hit_tokens", r.gpu_hit_tokens},
          {"cpu_hit_tokens", r.cpu_hit_tokens},
          {"prefill_tokens_computed", r.prefill_tokens_computed},
          {"prefill_tokens_saved", r.prefill_tokens_saved},
          {"output_tokens", r.output_tokens},
          {"blocks_stored", r.blocks_stored},
          {"blocks_loaded", r.blocks_loaded},
          {"bytes_stored", r.bytes_stored},
          {"bytes_loaded", r.bytes_loaded},
          {"jobs_failed", r.jobs_failed},
          {"loads_verified", r.loads_verified},
          {"load_mismatches", r.load_mismatches},
          {"step_errors", r.step_errors},
          {"hung_requests", r.hung_requests},
          {"busy_slots", r.busy_slots},
          {"double_completions", r.double_completions},
          {"requests_recomputed", r.requests_recomputed},
          {"gpu_cache_resets", r.gpu_cache_resets},
          {"pending_jobs", r.pending_jobs},
          {"rank_jobs_known", r.rank_jobs_known},
          {"restarts", r.restarts},
          {"sim_seconds", round3(r.sim_seconds)},
          {"ttft_p50_ms", round3(r.ttft_p50_ms)},
          {"ttft_p99_ms", round3(r.ttft_p99_ms)},
          {"output_tokens_per_s", round3(r.output_tokens_per_s)},
          {"problems", r.problems}};
}

}  // namespace

nlohmann::json counts_json(const run_report& r) {
  nlohmann::json j = counts_without_tier(r);
  if (r.file_tier) j["file_tier"] = tier_json(*r.file_tier);
  return j;
}

nlohmann::json summary_json(const run_report& r) {
  nlohmann::json j{{"event", "summary"}};
  j.update(counts_json(r));
  j["store_gbps"] = round3(r.store_gbps);
  j["load_gbps"] = round3(r.load_gbps);
  j["step_p50_us"] = round3(r.step_p50_us);
  j["step_p99_us"] = round3(r.step_p99_us);
  j["connector_ns"] = std::round(r.connector_ns);
  j["connector_share"] = std::round(r.connector_share * 1e6) / 1e6;
  j["copy_share"] = std::round(r.copy_share * 1e6) / 1e6;
  j["wall_seconds"] = round3(r.wall_seconds);
  j["ok"] = r.ok();
  return j;
}

std::string summary_table(const run_report& r) {
  std::string out = std::string("simulated engine, offload ") + (r.offload ? "on" : "off") + "\n";
  out += table_line("steps", std::to_string(r.steps));
  out +=
      table_line("requests finished",
                 std::to_string(r.requests_finished) + " of " + std::to_string(r.requests_arrived) +
                     " (" + std::to_string(r.requests_aborted) + " aborted at the drain's bound)");
  out += table_line("prefill tokens computed", std::to_string(r.prefill_tokens_computed));
  out += table_line("hit tokens gpu / cpu",
                    std::to_string(r.gpu_hit_tokens) + " / " + std::to_string(r.cpu_hit_tokens));
  out += table_line("blocks stored / loaded",
                    std::to_string(r.blocks_stored) + " / " + std::to_string(r.blocks_loaded));
  out += table_line("loads verified", std::to_string(r.loads_verified) + " blocks, " +
                                          std::to_string(r.load_mismatches) + " mismatches");
  out += table_line("jobs failed", std::to_string(r.jobs_failed));
  out += table_line("preemptions", std::to_string(r.preemptions));
  if (r.gpu_cache_resets > 0) {
    out += table_line("gpu cache resets", std::to_string(r.gpu_cache_resets) + " (" +
                                              std::to_string(r.requests_recomputed) +
                                              " requests recomputed)");
  }
  if (r.file_tier) {
    const tier_figures& t = *r.file_tier;
    out += table_line("file tier cascaded", std::to_string(t.cascaded_blocks) + " blocks (" +
                                                std::to_string(t.cascades_skipped) + " skipped, " +
                                                std::to_string(t.cascades_failed) + " failed)");
    out += table_line("file tier promoted", std::to_string(t.promoted_blocks) + " blocks (" +
                                                std::to_string(t.promotions_failed) + " failed; " +
                                                std::to_string(t.hits) + " hits of " +
                                                std::to_string(t.queries) + " queries)");
  }
  out += table_line("simulated time", fixed3(r.sim_seconds) + " s");
  out += table_line("ttft p50 / p99 (sim)",
                    fixed3(r.ttft_p50_ms) + " / " + fixed3(r.ttft_p99_ms) + " ms");
  out += table_line("output tokens/s (sim)", fixed3(r.output_tokens_per_s));
  out += table_line("step p50 / p99 (wall)",
                    fixed3(r.step_p50_us) + " / " + fixed3(r.step_p99_us) + " us");
  out +=
      table_line("connector share", fixed3(r.connector_share * 100) + " % of the simulated time");
  out += table_line("copy share", fixed3(r.copy_share * 100) + " % of the simulated time");
  out += table_line("hung / pending", std::to_string(r.hung_requests) + " requests / " +
                                          std::to_string(r.pending_jobs) + " jobs");
  for (const auto& p : r.problems) out += "  problem: " + p + "\n";
  return out;
}

}  // namespace kvc::sim
