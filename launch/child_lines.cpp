#include "launch/child_lines.hpp"

#include <cstdint>

namespace kvc::launch {

namespace {

using nlohmann::json;

std::string num(const json& j, const char* key) {
  return std::to_string(j.value(key, uint64_t{0}));
}

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
                    num(j, "requests_aborted") + " aborted, " +
                    count(j, "jobs_failed", "job", "jobs") + " failed";
  const json problems = j.value("problems", json::array());
  if (problems.is_array() && !problems.empty() && problems[0].is_string()) {
    out += "; " + problems[0].get<std::string>();
  }
  return out;
}

std::string fault_report_text(const json& j) {
  uint64_t fired = 0;
  const json kinds = j.value("fired", json::object());
  for (const auto& [kind, n] : kinds.items()) {
    if (n.is_number_unsigned()) fired += n.get<uint64_t>();
  }
  return "fault report: " + plural(fired, "fault", "faults") + " fired, " +
         count(j, "jobs_failed", "job", "jobs") + " failed; the invariants " +
         (j.value("invariants_ok", false) ? "hold" : "failed");
}

}  // namespace

std::optional<std::string> child_line_text(const json& j, const std::string& line) {
  if (!j.is_object() || !j.contains("event") || !j["event"].is_string()) return line;
  const std::string event = j["event"].get<std::string>();
  if (event == "progress" || event == "connector_steps" || event == "finished") {
    return std::nullopt;
  }
  if (event == "listening") {
    return "listening on port " + num(j, "port") + " for " +
           count(j, "world_size", "rank", "ranks") + "; segment " + j.value("segment", "");
  }
  if (event == "ready") {
    return "every rank registered (" + count(j, "world_size", "rank", "ranks") + "): running";
  }
  if (event == "registered") {
    const uint64_t incarnation = j.value("incarnation", uint64_t{0});
    return "registered as rank " + num(j, "rank") +
           (incarnation > 0 ? " (incarnation " + std::to_string(incarnation) + ")" : "");
  }
  if (event == "runner") {
    return "ran " + count(j, "steps", "step", "steps") + ": " +
           count(j, "loads_verified", "load", "loads") + " verified, " +
           count(j, "load_mismatches", "mismatch", "mismatches") + ", " +
           count(j, "step_errors", "step error", "step errors");
  }
  if (event == "stopped") {
    return j.contains("workers") ? "stopped (" + count(j, "workers", "worker", "workers") + ")"
                                 : std::string("stopped");
  }
  if (event == "smoke") {
    return "the smoke run passed: " + count(j, "steps", "step", "steps") + ", " +
           count(j, "jobs_ok", "job", "jobs") + " completed, " + num(j, "jobs_failed") +
           " failed";
  }
  if (event == "sim") return sim_text(j);
  if (event == "fault_report") return fault_report_text(j);
  if (event == "rank_lost") {
    return "rank " + num(j, "rank") + " (incarnation " + num(j, "incarnation") + ") is lost";
  }
  if (event == "device_lost") {
    return "rank " + num(j, "rank") + " lost its device: " + j.value("detail", "");
  }
  return line;
}

}  // namespace kvc::launch
