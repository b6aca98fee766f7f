#pragma once
/// engine_traits: the engines a role process can run (launch/engines/engine.hpp), by name, and
/// what the launcher and the role processes need to know of each: whether it waits for every
/// step's output, whether its workers take model input from an executor channel, whether
/// `kvconnect launch` runs it, whether it reports the simulated run's figures, whether it runs
/// without offloading (offload.enabled false). Callers ask these properties; none compares
/// engine names. Pure: no I/O.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <vector>

#include "proto/status.hpp"

namespace kvc::launch {

struct worker_process_options;

/// The engine a scheduler process runs on its config: none (it serves until a signal), the
/// smoke run of workload.steps store/load steps, or the simulated engine (launch/engines/sim/).
/// A worker runs the rank side of the same engine.
enum class engine_kind : uint8_t { serve = 0, smoke = 1, sim = 2 };

struct engine_traits {
  engine_kind kind;
  std::string_view name;  ///< what --engine says: "serve" | "smoke" | "sim"
  /// It drives steps and waits for each one's output: its step wait must outlast the jobs'
  /// deadline (step_wait_problem).
  bool waits_for_steps;
  /// Its workers take each step's model input from the scheduler's executor channel
  /// (--executor) and print their load checks ("runner") as they end.
  bool executor_channel;
  /// `kvconnect launch --engine` runs it: it ends by itself after workload.steps.
  bool launchable;
  /// Its scheduler reports the simulated run's figures ("sim", "finished"), which the launcher
  /// tabulates and `launch --compare` pairs with a run without offloading.
  bool run_figures;
  /// How the launcher's reasons name its run ("the smoke run passed").
  std::string_view run_name;
  /// Why it cannot run with offload.enabled false; empty: it can (the simulated engine runs as
  /// vLLM does without a KV connector: no connector, no pool, its ranks' forward passes only).
  std::string_view needs_offload;
};

/// The traits of `kind`.
const engine_traits& traits_of(engine_kind kind);
/// "serve" | "smoke" | "sim".
std::string_view to_string(engine_kind kind);
/// The engine named `name`; errc::invalid_argument naming the three otherwise.
result<engine_kind> parse_engine_kind(std::string_view name);
/// Every engine's name, in the table's order; only the launchable ones with `launchable_only`
/// (what --engine takes).
std::vector<std::string> engine_names(bool launchable_only);
/// The engine `kvconnect scheduler`'s flags pick: --engine's (`engine`: given or not), or with
/// --smoke-steps alone (`smoke_steps_given`) the smoke run, whose step count it is; serve
/// without either. errc::invalid_argument for --smoke-steps with another engine.
result<engine_kind> scheduler_engine_of_flags(const std::optional<std::string>& engine,
                                              bool smoke_steps_given);
/// Why a run of `engine` with offloading `offload`, injected faults (`faults`: any given) and
/// restarts of failed ranks (`restarts`: restart.policy on-failure) cannot start, naming the
/// key; empty when it can. Offloading off: the engines whose traits need it are refused, and so
/// are injected faults (they act on the connector's step channel, its transfers and the ranks it
/// tracks, none of which a run without offloading has) and restarts (no connector sees a rank go
/// and come back, so nothing would hold the steps until a restarted rank rejoined).
std::string offload_problem(const engine_traits& engine, bool offload, bool faults,
                            bool restarts = false);
/// The engine a worker process runs the rank side of: sim with an executor channel, else the
/// synthetic KV cache's (serve; the smoke run's ranks are the same).
engine_kind engine_of(const worker_process_options& o);

}  // namespace kvc::launch
