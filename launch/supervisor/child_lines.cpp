#include "launch/supervisor/child_lines.hpp"

#include <cstdint>

namespace kvc::launch {

namespace {

using nlohmann::json;

std::string plural(uint64_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string count(const json& j, const char* key, const std::string& one,
                  const std::string& many) {
  return plural(j.value(key, uint64_t{0}), one, many);
}

std::string sim_text(const json& j) {
  std::string out = std::string(j.value("ok", false) ? "the simulated run passed" :
                                                       "the simulated run failed") +
                    " after " + count(j, "steps", "step", "steps") + ": " +
                    count(j, "requests_finished", "request", "requests") + " finished, " +
                    std::to_string(j.value("requests_aborted", uint64_t{0})) + " aborted, " +
                    count(j, "jobs_failed", "job", "jobs") + " failed";
  const json problems = j.value("problems", json::array());
  if (problems.is_array() && !problems.empty() && problems[0].is_string()) {
    out += "; " + problems[0].get<std::string>();
  }
  return out;
}

std::string fault_report_text(const fault_outcome& o) {
  uint64_t fired = 0;
  for (uint64_t n : o.fired) fired += n;
  return "fault report: " + plural(fired, "fault", "faults") + " fired, " +
         plural(o.jobs_failed, "job", "jobs") + " failed; the invariants " +
         (invariants_ok(o) ? "hold" : "failed");
}

}  // namespace

std::optional<std::string> child_line_text(const child_event& event) {
  using text = std::optional<std::string>;
  return std::visit(
      overloaded{
          [](const progress_event&) -> text { return std::nullopt; },
          [](const connector_steps_event&) -> text { return std::nullopt; },
          [](const finished_event&) -> text { return std::nullopt; },
          [](const listening_event& e) -> text {
            if (e.segment.empty()) {  // no connector, no pool (offload.enabled false)
              return "without offloading (no connector, no pool) for " +
                     plural(e.world_size, "rank", "ranks") + "; executor " + e.executor;
            }
            return "listening on port " + std::to_string(e.port) + " for " +
                   plural(e.world_size, "rank", "ranks") + "; segment " + e.segment;
          },
          [](const ready_event& e) -> text {
            return "every rank ready (" + plural(e.world_size, "rank", "ranks") +
                   "): running";
          },
          [](const registered_event& e) -> text {
            return "registered as rank " + std::to_string(e.rank) +
                   (e.incarnation > 0 ? " (incarnation " + std::to_string(e.incarnation) + ")"
                                      : "");
          },
          [](const runner_event& e) -> text {
            return "ran " + plural(e.steps, "step", "steps") + ": " +
                   plural(e.loads_verified, "load", "loads") + " verified, " +
                   plural(e.load_mismatches, "mismatch", "mismatches") + ", " +
                   plural(e.step_errors, "step error", "step errors");
          },
          [](const stopped_event& e) -> text {
            return e.workers ? "stopped (" + plural(*e.workers, "worker", "workers") + ")"
                             : std::string("stopped");
          },
          [](const smoke_event& e) -> text {
            return "the smoke run passed: " + plural(e.steps, "step", "steps") + ", " +
                   plural(e.jobs_ok, "job", "jobs") + " completed, " +
                   std::to_string(e.jobs_failed) + " failed";
          },
          [](const sim_event& e) -> text { return sim_text(e.summary); },
          [](const fault_report_event& e) -> text { return fault_report_text(e.outcome); },
          [](const rank_lost_event& e) -> text {
            return "rank " + std::to_string(e.rank) + " (incarnation " +
                   std::to_string(e.incarnation) + ") is lost";
          },
          [](const device_lost_event& e) -> text {
            return "rank " + std::to_string(e.rank) + " lost its device: " + e.detail;
          }},
      event);
}

std::optional<std::string> child_line_text(const result<child_event>& parsed,
                                           const std::string& line) {
  return parsed ? child_line_text(*parsed) : line;
}

}  // namespace kvc::launch
