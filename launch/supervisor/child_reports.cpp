#include "launch/supervisor/child_reports.hpp"

#include "launch/config/fault_report.hpp"

namespace kvc::launch {

using nlohmann::json;

double child_reports::rank_connector_ns() {
  slowest_.finish();
  return slowest_.total_ns();
}

std::optional<json> child_reports::fault_report(const process_fault_tally& process) const {
  std::optional<json> own;
  if (!fault_report_ && process.scheduled) {
    // The scheduler was killed (or failed) before its report: the launcher's counts only.
    own = json::parse(fault_report_line(fault_outcome{.seed = process.seed}));
  }
  if (!fault_report_ && !own) return std::nullopt;
  json merged = fault_report_ ? *fault_report_ : *own;
  for (size_t k = 0; k < fault_kind_count; ++k) {
    if (process.fired[k] == 0) continue;
    const std::string kind(to_string(static_cast<fault_kind>(k)));
    merged["fired"][kind] = merged["fired"].value(kind, uint64_t{0}) + process.fired[k];
  }
  if (process.scheduler_killed) {
    // Invariant of kill_scheduler: the workers noticed the lost scheduler and exited.
    merged["workers_exited_on_their_own"] = !process.workers_killed;
    if (process.workers_killed) merged["invariants_ok"] = false;
  }
  for (const auto& [kind, n] : worker_fired_) {
    if (merged["fired"].contains(kind) && merged["fired"][kind].is_number_unsigned()) {
      merged["fired"][kind] = merged["fired"][kind].get<uint64_t>() + n;
    }
  }
  return merged;
}

}  // namespace kvc::launch
