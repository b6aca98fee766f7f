#pragma once
/// child_reports: what the children of one node reported, kept for the launch's summary and
/// fault report: the scheduler's figures (its smoke, sim and finished lines) and its fault
/// report, the workers' runner lines, their connector time (each step's slowest rank,
/// slowest_rank_sum) and the copy faults they fired. The launcher (node_run) feeds it the child
/// events; the fault report merges the process faults the launcher carried out.
///
/// Pure; not thread-safe (the launcher's loop owns it).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/roles/child_events.hpp"
#include "launch/supervisor/slowest_rank_sum.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::launch {

/// The process faults the launcher carried out (process_faults.hpp) and their outcome.
struct process_fault_tally {
  bool scheduled = false;        ///< the config named process faults for this node
  uint64_t seed = 0;             ///< runtime.fault_seed
  fault_counts fired{};          ///< carried out, by kind
  bool scheduler_killed = false;  ///< kill_scheduler fired
  bool workers_killed = false;    ///< a worker outlived the scheduler's death and was killed
};

class child_reports {
 public:
  /// `ranks`: the node's ranks.
  explicit child_reports(const std::vector<rank_id>& ranks) : slowest_(ranks) {}

  void add(const smoke_event& e) { smoke_ = to_json(e); }
  void add(const sim_event& e) { sim_ = e.summary; }
  void add(const finished_event& e) { finished_ = e.line; }
  void add(const fault_report_event& e) { fault_report_ = to_json(e); }
  void add(const runner_event& e) { runners_.push_back(to_json(e)); }
  void add(const connector_steps_event& e) {
    for (const auto& [step, ns] : e.ns) slowest_.add(e.rank, step, ns);
  }
  /// A worker's last line (stopped, device_lost): its copy faults, once per incarnation.
  void add_worker_fired(const fired_faults& fired) {
    for (const auto& [kind, n] : fired) worker_fired_[kind] += n;
  }

  /// The scheduler's smoke line (the smoke run passed).
  const std::optional<nlohmann::json>& smoke() const { return smoke_; }
  /// The scheduler's sim line (the simulated run's figures).
  const std::optional<nlohmann::json>& sim() const { return sim_; }
  /// The scheduler's finished line: the simulated run's finished requests (--compare).
  const std::optional<nlohmann::json>& finished() const { return finished_; }
  /// The workers' runner lines.
  const std::vector<nlohmann::json>& runners() const { return runners_; }
  /// Each step's slowest rank of this node, summed over the steps; ends the sum (the run ended).
  double rank_connector_ns();

  /// The run's fault report: the scheduler's line (channel faults, the coordinator's counts)
  /// with the workers' copy faults and the launcher's process faults added to `fired`; after
  /// kill_scheduler, whether the workers exited on their own (an invariant). Without the
  /// scheduler's line: the launcher's counts alone when process faults were scheduled (the
  /// scheduler was killed or failed first), else none.
  std::optional<nlohmann::json> fault_report(const process_fault_tally& process) const;

 private:
  std::optional<nlohmann::json> smoke_;
  std::optional<nlohmann::json> sim_;
  std::optional<nlohmann::json> finished_;
  std::optional<nlohmann::json> fault_report_;
  std::vector<nlohmann::json> runners_;
  slowest_rank_sum slowest_;
  std::map<std::string, uint64_t> worker_fired_;
};

}  // namespace kvc::launch
