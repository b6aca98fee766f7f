#pragma once
/// The engine seam of the role processes: embed::scheduler_engine / embed::rank_engine
/// (actors/embed/engine.hpp, installed with the embedding API) and what a role process adds to
/// them. A scheduler process holds one `scheduler_engine` (it drives the scheduler_connector:
/// waits for the ranks, runs its steps, says how the run went); a worker process holds one
/// `rank_engine` (it drives the worker_connector, one step at a time, until the scheduler stops
/// it). The engines, by name
/// (engine_traits.hpp): "serve" (no steps of its own: the coordinator takes what arrives until a
/// signal; its ranks run every step's transfers on the synthetic KV cache), "smoke" (the smoke
/// run: store/load round trips checked byte for byte; its ranks are serve's) and "sim" (the
/// simulated engine: its workload's steps, each step's model input published to the ranks'
/// model runners on the executor channel). The role processes (launch/cli/role_processes.cpp)
/// hold one of each through the factories and never branch on which.
///
/// The connector is the engine's optional offload side: with offload.enabled false a role
/// process creates none (no pool, no segment, no step channel) and runs the engine through its
/// *_without_offload calls instead, as vLLM runs without a KV connector. Only an engine whose
/// traits allow it is run so (engine_traits::needs_offload empty: the simulated engine, whose
/// steps are then its model's forward passes alone); the factories, and the role processes
/// before them, refuse the others with offload_problem's error.
///
/// What an engine says goes through `engine_io::emit` as child events (child_events.hpp), in
/// the order the launcher reads them; its stop is the process's signals.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "actors/embed/engine.hpp"
#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "launch/config/fault_report.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/roles/child_events.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/roles/role_options.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// Where an engine's lines go and what ends it early.
struct engine_io {
  signal_watcher& signals;                       ///< a signal ends the engine's run
  std::function<void(const child_event&)> emit;  ///< its JSON lines, in order
};

/// The scheduler side of an engine in a scheduler process, called in this order: configure,
/// open (once the connector listens), run (until its steps end or a signal), outcome.
class scheduler_engine : public embed::scheduler_engine {
 public:
  /// Once the connector listens: opens what the engine's ranks reach it by besides the step
  /// channel; the endpoint for the "listening" line (empty: none).
  virtual result<std::string> open() = 0;
  /// The same run without a connector (offload.enabled false: no pool, no step channel), as
  /// vLLM runs without a KV connector; the process's exit code so far. Only an engine whose
  /// traits allow it (engine_traits::needs_offload empty) is run so: the factory refuses the
  /// others; for them this is errc::invalid_argument's exit code 2 with the reason logged.
  virtual int run_without_offload();
  /// After the connector's shutdown: the run's fault report (its seed `seed`). Only with a
  /// connector: injected faults need one (offload_problem).
  virtual fault_outcome outcome(const embed::scheduler_connector& sc, uint64_t seed) const = 0;
};

/// The rank side of an engine in a worker process: prepare, then run until the scheduler stops
/// it or a signal; without offloading, the same without a connector.
class rank_engine : public embed::rank_engine {
 public:
  /// offload.enabled false: prepare() without a connector (the engine's KV cache in a copy
  /// engine of its own). Only an engine whose traits allow it is run so; the others' default
  /// is errc::invalid_argument.
  virtual status prepare_without_offload();
  /// offload.enabled false: the rank's steps until their end or a signal; what ended them.
  virtual status run_without_offload();
};

/// The scheduler side of engine `kind` for a process started with `o` over the pool `plan`;
/// the engine's own set-up errors (the smoke run's geometry), and errc::invalid_argument with
/// offload_problem's sentence when `o` turns offloading off for an engine that needs it.
result<std::unique_ptr<scheduler_engine>> make_scheduler_engine(engine_kind kind,
                                                                const scheduler_process_options& o,
                                                                const pool_plan& plan,
                                                                engine_io io);
/// The same, by name ("serve" | "smoke" | "sim"); errc::invalid_argument for another name.
result<std::unique_ptr<scheduler_engine>> make_scheduler_engine(std::string_view name,
                                                                const scheduler_process_options& o,
                                                                const pool_plan& plan,
                                                                engine_io io);
/// The rank side of engine `kind` for a worker process started with `o`.
std::unique_ptr<rank_engine> make_rank_engine(engine_kind kind, const worker_process_options& o,
                                              engine_io io);
/// The same, by name; errc::invalid_argument for another name.
result<std::unique_ptr<rank_engine>> make_rank_engine(std::string_view name,
                                                      const worker_process_options& o,
                                                      engine_io io);

/// The fault report of a scheduler whose engine keeps no run report of its own (the smoke run,
/// which fails on any hung request, leak or byte mismatch itself; serving): the channel faults
/// it injected and what the coordinator counted; the planner's in-flight jobs are the pending
/// ones.
fault_outcome scheduler_outcome(const embed::scheduler_connector& sc, uint64_t seed);

}  // namespace kvc::launch
