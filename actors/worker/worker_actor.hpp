#pragma once
/// The worker actor: one per rank, the network side of the connector's worker. It registers
/// with the scheduler (runtime/handshake.hpp), receives one connector_metadata per engine step,
/// and sends the rank's completion reports to the coordinator the scheduler named: exactly one
/// report per step, in step order, events numbered per (rank, incarnation) by a
/// completion_stamper.
///
/// Two modes, chosen at spawn:
///   * execute (a standalone `kvconnect worker` process): after the scheduler accepted it, the
///     actor builds its rank_runtime (engine, shm attachment, synthetic KV cache) with the given
///     factory and executes each metadata on receipt through a step_runner. While a step waits
///     for its transfers the actor polls itself with a delayed tick (every poll_interval, only
///     while a step is open): no busy spin, no blocking except flush waits in
///     handle_preemptions.
///   * relay (an engine embedding kvconnect drives the per-step calls in its worker thread): the
///     actor pushes each metadata into a handoff_queue that the engine thread pops, and the
///     engine thread sends back (jobs_done, step, results) when it closed a step; the actor
///     stamps and forwards them. The connector_worker then lives in the engine thread.
///
/// Life cycle: the actor monitors the scheduler and ends with the scheduler's exit reason when
/// it goes (user_shutdown on a clean stop, remote_link_unreachable when it died). A refused
/// registration, a registration that times out, or a runtime that cannot be built ends it with
/// that error; options.on_registered is told the outcome of the registration once.
///
/// Owned by the actor system; its state is touched only by the actor itself (on_registered runs
/// in the actor's context).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <caf/fwd.hpp>

#include "actors/runtime/handoff_queue.hpp"
#include "actors/runtime/handshake.hpp"
#include "actors/runtime/interfaces.hpp"
#include "actors/worker/completion_stamper.hpp"
#include "actors/worker/rank_runtime.hpp"
#include "actors/worker/step_runner.hpp"
#include "proto/completion.hpp"
#include "proto/status.hpp"

namespace kvc::worker {

/// (jobs_done, step, results), relay mode: the engine thread closed `step`; these job results
/// were observed in it (possibly none).
using jobs_done_atom = caf::atom_constant<caf::atom("kvc_jobsdn")>;

/// The implementation's interface: the public worker_actor plus its own poll timer and the relay
/// message of the local engine thread.
using worker_impl =
    runtime::worker_actor::extend<caf::reacts_to<runtime::tick_atom>,
                                  caf::reacts_to<jobs_done_atom, step_id, std::vector<job_result>>>;

using metadata_queue = runtime::handoff_queue<connector_metadata>;
/// Builds the execute-mode runtime once the scheduler accepted the worker.
using runtime_factory = std::function<result<std::unique_ptr<rank_runtime>>()>;

struct worker_options {
  runtime::worker_registration registration;
  /// How long the scheduler may take to answer the registration.
  std::chrono::milliseconds register_timeout{5000};
  /// Execute mode: how often an open step is polled for finished transfers.
  std::chrono::microseconds poll_interval{500};
  /// Told once, in the actor's context, whether the registration succeeded (and, in execute
  /// mode, the runtime was built) or why not.
  std::function<void(const status&)> on_registered;
};

struct worker_state {
  worker_options opts;
  runtime::scheduler_actor scheduler;
  runtime::coordinator_actor coordinator;  // valid once registered
  // execute mode
  runtime_factory factory;
  std::unique_ptr<rank_runtime> runtime;
  std::optional<step_runner> runner;
  bool tick_armed = false;
  // relay mode
  std::shared_ptr<metadata_queue> inbox;
  std::optional<completion_stamper> stamper;
  static inline const char* name = "kvc.worker";
};

/// Spawns an execute-mode worker that registers with `scheduler`. Error (invalid_argument),
/// nothing spawned: no scheduler, no factory, or a poll interval <= 0.
result<worker_impl> spawn_executing_worker(caf::actor_system& sys,
                                           runtime::scheduler_actor scheduler, worker_options opts,
                                           runtime_factory factory);

/// Spawns a relay-mode worker that registers with `scheduler` and pushes every metadata into
/// `inbox` (closed when the actor ends). Error (invalid_argument): no scheduler or no inbox.
result<worker_impl> spawn_relay_worker(caf::actor_system& sys, runtime::scheduler_actor scheduler,
                                       worker_options opts, std::shared_ptr<metadata_queue> inbox);

}  // namespace kvc::worker
