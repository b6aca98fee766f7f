#include "launch/config/fault_report.hpp"

#include <utility>

#include <nlohmann/json.hpp>

namespace kvc::launch {

bool invariants_ok(const fault_outcome& o) noexcept {
  return o.hung_requests == 0 && o.leaked_slots == 0 && o.pending_jobs == 0 &&
         o.load_mismatches == 0 && o.double_completions == 0;
}

bool invariants_ok(const nlohmann::json& report) {
  auto count = [&](const char* key) { return report.value(key, uint64_t{0}); };
  const fault_outcome o{.hung_requests = count("hung_requests"),
                        .leaked_slots = count("leaked_slots"),
                        .pending_jobs = count("pending_jobs"),
                        .load_mismatches = count("load_mismatches"),
                        .double_completions = count("double_completions")};
  return invariants_ok(o) && report.value("workers_exited_on_their_own", true);
}

void take_invariants(nlohmann::json& report, const nlohmann::json& summary) {
  for (const auto& [from, to] : {std::pair{"hung_requests", "hung_requests"},
                                 {"pending_jobs", "pending_jobs"},
                                 {"double_completions", "double_completions"},
                                 {"load_mismatches", "load_mismatches"},
                                 {"busy_slots", "leaked_slots"}}) {
    if (summary.contains(from) && summary[from].is_number_integer()) report[to] = summary[from];
  }
  report["invariants_ok"] = invariants_ok(report);
}

std::string fault_report_line(const fault_outcome& o) {
  // ordered_json: keys in insertion order, as the issue writes them.
  nlohmann::ordered_json fired = nlohmann::ordered_json::object();
  for (size_t k = 0; k < fault_kind_count; ++k) {
    fired[std::string(to_string(static_cast<fault_kind>(k)))] = o.fired[k];
  }
  nlohmann::ordered_json line;
  line["event"] = "fault_report";
  line["seed"] = o.seed;
  line["fired"] = std::move(fired);
  line["jobs_failed"] = o.jobs_failed;
  line["jobs_recovered"] = o.jobs_recovered;
  line["requests_recomputed"] = o.requests_recomputed;
  line["late_reports_dropped"] = o.late_reports_dropped;
  line["duplicates_dropped"] = o.duplicates_dropped;
  line["hung_requests"] = o.hung_requests;
  line["leaked_slots"] = o.leaked_slots;
  line["pending_jobs"] = o.pending_jobs;
  line["load_mismatches"] = o.load_mismatches;
  line["double_completions"] = o.double_completions;
  line["invariants_ok"] = invariants_ok(o);
  return line.dump();
}

int fault_report_exit_code(const fault_outcome& o, int otherwise) noexcept {
  return invariants_ok(o) ? otherwise : 3;
}

}  // namespace kvc::launch
