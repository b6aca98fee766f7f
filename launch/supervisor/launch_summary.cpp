#include "launch/supervisor/launch_summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include "launch/supervisor/slowest_rank_sum.hpp"

namespace kvc::launch {

using nlohmann::json;

bool add_runner_checks(json& summary, const std::vector<json>& runners, size_t ranks) {
  uint64_t verified = 0;
  uint64_t mismatches = 0;
  uint64_t step_errors = 0;
  uint64_t steps = 0;
  for (const auto& r : runners) {
    verified += r.value("loads_verified", uint64_t{0});
    mismatches += r.value("load_mismatches", uint64_t{0});
    step_errors += r.value("step_errors", uint64_t{0});
    steps = std::max(steps, r.value("steps", uint64_t{0}));
    for (const auto& m : r.value("mismatches", json::array())) summary["problems"].push_back(m);
  }
  if (!summary.contains("steps") || summary["steps"].is_null()) summary["steps"] = steps;
  summary["loads_verified"] = verified;
  summary["load_mismatches"] = mismatches;
  summary["step_errors"] = step_errors;
  summary["ranks_reported"] = runners.size();
  return runners.size() == ranks && mismatches == 0;
}

void add_connector_share(json& summary, const json& sim, double rank_connector_ns) {
  const double scheduler_ns = sim.value("connector_ns", 0.0);
  summary["scheduler_connector_ns"] = std::round(scheduler_ns);
  summary["rank_connector_ns"] = std::round(rank_connector_ns);
  summary["connector_share"] =
      std::round(launch_connector_share(scheduler_ns, rank_connector_ns,
                                        sim.value("sim_seconds", 0.0)) *
                 1e6) /
      1e6;
}

bool add_sim_figures(json& summary, const std::optional<json>& sim,
                     const std::vector<json>& runners, size_t ranks, double rank_connector_ns) {
  if (sim) {
    for (const auto& [k, v] : sim->items()) {
      if (!summary.contains(k)) summary[k] = v;  // the launch's own fields stay
    }
    summary.erase("connector_ns");  // the scheduler's alone: scheduler_connector_ns below
    add_connector_share(summary, *sim, rank_connector_ns);
  } else {
    summary["connector_share"] = json();  // the simulated time is node 0's
  }
  return add_runner_checks(summary, runners, ranks);
}

void print_sim_table(const json& s) {
  std::string out = "simulated engine over " + s.value("ranks", json(0)).dump() + " ranks: " +
                    s.value("reason", std::string{}) + "\n";
  for (const char* k :
       {"steps", "requests_finished", "requests_aborted", "prefill_tokens_computed",
        "gpu_hit_tokens", "cpu_hit_tokens", "prefill_tokens_saved", "blocks_stored",
        "blocks_loaded", "loads_verified", "load_mismatches", "jobs_failed", "preemptions",
        "gpu_cache_resets", "requests_recomputed",
        "hung_requests", "pending_jobs", "sim_seconds", "ttft_p50_ms", "output_tokens_per_s",
        "step_p50_us", "step_p99_us", "connector_share", "store_gbps", "load_gbps",
        "wall_seconds"}) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "  %-24s %s\n", k, s.value(k, json()).dump().c_str());
    out += buf;
  }
  std::cerr << out << std::flush;
}

}  // namespace kvc::launch
