#pragma once
/// The scheduler actor: the control plane's side of the scheduler. It does not plan and no
/// step's message passes through it: the planner runs in the engine's scheduler thread and a
/// step's messages travel on the step channel (actors/channel/). What it does (handlers of a few
/// lines; worker_registry decides):
///   * registration (hello): admits or refuses a worker (handshake.hpp); an admitted
///     worker is monitored, announced to the coordinator (rank_up) and answered with the
///     coordinator's handle and the step channel's endpoint; a refusal is logged and answered
///     with the reason as a kvc error.
///   * a worker's death (down_msg): rank_down to the coordinator; the rank may register again
///     with a higher incarnation.
///   * ready: answered with the world size once every rank has a live worker.
///   * stop: tells every live worker to stop, answered with their number once all are down.
///     The caller then ends the scheduler itself (anon_send_exit).
/// rank_up and rank_down of a rank go to the coordinator on one path, so rank_down of an
/// incarnation always arrives before rank_up of the next.
///
/// Owned by the actor system; its state is touched only by the actor itself.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/control/interfaces.hpp"
#include "actors/scheduler/handshake.hpp"
#include "actors/scheduler/worker_registry.hpp"
#include "actors/trace/tracer.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

/// The implementation's interface: the workers' (published) plus the hosting process's.
using scheduler_impl = control::scheduler_actor::extend<
    caf::replies_to<control::ready_atom>::with<uint32_t>,  // every rank registered
    caf::replies_to<control::stop_atom>::with<uint32_t>>;  // every worker stopped

struct scheduler_options {
  scheduler::handshake_expectation handshake;
  /// The step channel's endpoint for ranks in other processes (registration replies carry it).
  std::string channel_endpoint;
  /// Records the control messages (registration, rank_up / rank_down, loss, stop); null: none.
  std::shared_ptr<trace::tracer> tracer;
};

struct scheduler_state {
  std::optional<worker_registry> registry;     // engaged by the behavior function
  std::vector<control::worker_actor> workers;  // by rank; invalid when not live
  control::coordinator_actor coordinator;
  std::string channel_endpoint;
  std::shared_ptr<trace::tracer> tracer;  // null: trace off
  std::vector<uint32_t> incarnations;     // by rank: of the live (or last) worker
  std::vector<caf::typed_response_promise<uint32_t>> ready_waiters;
  std::vector<caf::typed_response_promise<uint32_t>> stop_waiters;
  static inline const char* name = "kvc.scheduler";
};

/// Spawns the scheduler; rank_up / rank_down go to `coordinator`. Error (invalid_argument),
/// nothing spawned: an invalid handshake expectation (scheduler::validate_expectation) or no
/// coordinator.
result<scheduler_impl> spawn_scheduler(caf::actor_system& sys, const scheduler_options& opts,
                                       control::coordinator_actor coordinator);

}  // namespace kvc::scheduler
