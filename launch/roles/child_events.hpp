#pragma once
/// child_events: the launcher's child protocol, one struct per line the role processes
/// (`kvconnect scheduler`, `kvconnect worker`) print on stdout, shared by both ends: the role
/// processes write a line with to_line(event), the launcher (and child_lines, what a launch
/// shows of them) reads it with parse_child_line and branches on the type, never on an event
/// name. Every line is one JSON object with an "event" key (docs/protocol.md, "Processes").
///
/// Three events carry figures whose format another room owns, kept as that room's JSON: the
/// progress line's counters (the smoke run's or the simulated engine's, progress_display
/// reads them), the simulated run's summary (sim::summary_json, launch_summary folds it) and
/// its finished requests (sim::finished_json, --compare reads them). The fault report is the
/// fault_outcome of fault_report.hpp and its line fault_report_line, byte for byte.
///
/// Pure functions and plain data; thread-safe.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/config/fault_report.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// Scheduler: published (port 0 picks a free port); the launcher starts the workers.
struct listening_event {
  uint64_t port = 0;
  std::string segment;
  uint64_t layout_checksum = 0;
  uint64_t world_size = 0;
  std::string executor;  ///< the simulated engine's executor channel; empty: none
  int64_t pid = 0;
  uint64_t metrics_port = 0;
  std::string kv_events_endpoint;
  std::string kv_events_replay_endpoint;
  friend bool operator==(const listening_event&, const listening_event&) = default;
};

/// Scheduler: every rank is ready (registered; without offloading, subscribed to the executor
/// channel); the engine's first step follows.
struct ready_event {
  uint64_t world_size = 0;
  friend bool operator==(const ready_event&, const ready_event&) = default;
};

/// Scheduler: a step ended. `figures`: the whole line, the engine's counters with it.
struct progress_event {
  step_id step = 0;
  nlohmann::json figures;
  friend bool operator==(const progress_event&, const progress_event&) = default;
};

/// Scheduler: the smoke run passed.
struct smoke_event {
  uint64_t steps = 0;
  uint64_t jobs_ok = 0;
  uint64_t jobs_failed = 0;
  uint64_t rounds_interrupted = 0;
  uint64_t slots_checked = 0;
  uint64_t bytes = 0;
  friend bool operator==(const smoke_event&, const smoke_event&) = default;
};

/// Scheduler: the simulated run's figures (sim::summary_json with "event":"sim").
struct sim_event {
  nlohmann::json summary;
  bool ok() const { return summary.value("ok", false); }
  friend bool operator==(const sim_event&, const sim_event&) = default;
};

/// Scheduler: the simulated run's finished requests (sim::finished_json), for --compare.
struct finished_event {
  nlohmann::json line;
  friend bool operator==(const finished_event&, const finished_event&) = default;
};

/// Scheduler: the coordinator holds `rank`'s `incarnation` lost.
struct rank_lost_event {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  friend bool operator==(const rank_lost_event&, const rank_lost_event&) = default;
};

/// Scheduler: the run's fault report, its last line (fault_report_line).
struct fault_report_event {
  fault_outcome outcome;
  friend bool operator==(const fault_report_event&, const fault_report_event&) = default;
};

/// Copy faults a worker injected, by kind name.
using fired_faults = std::map<std::string, uint64_t>;

/// Scheduler: its workers were stopped (`workers` set); worker: it was stopped (`rank` set;
/// `fired`: its copy faults, with injected faults only).
struct stopped_event {
  std::optional<uint64_t> workers;
  std::optional<rank_id> rank;
  std::optional<fired_faults> fired;
  friend bool operator==(const stopped_event&, const stopped_event&) = default;
};

/// Worker: registered as `rank` (`incarnation` > 0: a restart rejoined).
struct registered_event {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  int64_t pid = 0;
  friend bool operator==(const registered_event&, const registered_event&) = default;
};

/// Worker: its model runner's figures and load checks (the simulated engine), as it ends.
struct runner_event {
  rank_id rank = 0;
  uint64_t steps = 0;
  uint64_t tokens_written = 0;
  uint64_t loads_verified = 0;
  uint64_t load_mismatches = 0;
  uint64_t blocks_load_failed = 0;
  uint64_t step_errors = 0;
  uint64_t steps_connector_only = 0;
  uint64_t steps_skipped = 0;
  uint64_t connector_ns = 0;
  std::vector<std::string> mismatches;  ///< the first few, described
  friend bool operator==(const runner_event&, const runner_event&) = default;
};

/// Worker: its connector time of some steps, (step, ns) each.
struct connector_steps_event {
  rank_id rank = 0;
  std::vector<std::pair<step_id, uint64_t>> ns;
  friend bool operator==(const connector_steps_event&, const connector_steps_event&) = default;
};

/// Worker: its device became unusable; it exits so that the rank restarts.
struct device_lost_event {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  std::string detail;
  fired_faults fired;
  friend bool operator==(const device_lost_event&, const device_lost_event&) = default;
};

/// std::visit with one lambda per event type: `std::visit(overloaded{[](const ready_event&)
/// {...}, ...}, event)`.
template <class... F>
struct overloaded : F... {
  using F::operator()...;
};
template <class... F>
overloaded(F...) -> overloaded<F...>;

using child_event =
    std::variant<listening_event, ready_event, progress_event, smoke_event, sim_event,
                 finished_event, rank_lost_event, fault_report_event, stopped_event,
                 registered_event, runner_event, connector_steps_event, device_lost_event>;

/// The event's name on the wire ("listening", "ready", ...).
std::string_view event_name(const child_event& event);

/// The event's JSON object, "event" included.
nlohmann::json to_json(const child_event& event);

/// The event as one line (no newline): what a role process prints; to_json's keys in order,
/// but for the fault report, whose line is fault_report_line's.
std::string to_line(const child_event& event);

/// A line a role process printed. errc::invalid_argument with one sentence otherwise: the line
/// is no JSON object, has no "event" string, names an unknown event, or a field is missing or
/// of the wrong type ("event \"listening\": \"port\" is not an unsigned number").
result<child_event> parse_child_line(std::string_view line);

}  // namespace kvc::launch
