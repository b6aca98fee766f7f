#pragma once
/// The scheduler actor: the network side of the connector's scheduler. It does not plan: the
/// pure connector_scheduler lives in the engine's scheduler thread (behind the embedding facade),
/// which hands each step's connector_metadata to this actor and takes the aggregated
/// connector_outputs back from a handoff_queue, so the engine step never waits on the network.
///
/// What it does (handlers of a few lines; worker_registry decides):
///   * registration (hello): admits or refuses a worker (runtime/handshake.hpp); an admitted
///     worker is monitored, announced to the coordinator (rank_up) and answered with the
///     coordinator's handle; a refusal is logged and answered with the reason as a kvc error.
///   * a step (connector_metadata): sends expect(step, loads, stores) to the coordinator, then the
///     metadata to every live worker, in rank order. A step not above the previous one is logged
///     and dropped (the engine must number steps upwards).
///   * connector_output (from the coordinator): sent to the subscribed engine if there is one,
///     else pushed to the output queue.
///   * engine_hello (an engine's scheduler thread in another process): checks its registration
///     (token, protocol, topology, segment, layout) and subscribes its sink, one at a time;
///     submit (from the subscriber only): the same as a step. The subscriber is monitored.
///   * a worker's death (down_msg): rank_down to the coordinator, the rank may register again
///     with a higher incarnation.
///   * ready: answered with the world size once every rank has a live worker.
///   * stop: sends exit to every live worker, answered with their number once all are down.
///     The caller then ends the scheduler itself (anon_send_exit), which ends the coordinator.
///
/// The coordinator is spawned and linked by the scheduler (so it ends with it) unless one is
/// passed in (tests). Messages between the scheduler and the coordinator run on one path, so
/// rank_down always reaches the coordinator before the rank_up of the rank's next incarnation.
///
/// Owned by the actor system; its state is touched only by the actor itself. The output queue is
/// shared with the thread that takes the outputs (closed when the actor ends).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/fwd.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/runtime/handoff_queue.hpp"
#include "actors/runtime/handshake.hpp"
#include "actors/runtime/interfaces.hpp"
#include "actors/scheduler/worker_registry.hpp"
#include "proto/completion.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

/// (ready) -> world size, once every rank has a live worker.
using ready_atom = runtime::ready_atom;
/// (stop) -> number of workers stopped, once they are all down.
using stop_atom = caf::atom_constant<caf::atom("kvc_stop")>;

/// The implementation's interface: the public one (published to workers) plus the messages of
/// the process that hosts it. Publish it narrowed to runtime::scheduler_service_actor (or to
/// runtime::scheduler_actor where only workers may connect).
using scheduler_impl = runtime::scheduler_service_actor::extend<
    caf::reacts_to<connector_metadata>,           // one engine step to fan out (in process)
    caf::replies_to<stop_atom>::with<uint32_t>>;  // every worker stopped

using output_queue = runtime::handoff_queue<connector_output>;

struct scheduler_options {
  runtime::handshake_expectation handshake;
  /// Used when the scheduler spawns its own coordinator; world_size is taken from the handshake.
  coordinator::coordinator_options coordinator;
  /// Where admitted workers exchange the per-step messages (the registration reply carries it):
  /// empty for CAF messages, else the ZeroMQ endpoint of the engine's data plane, whose host
  /// then also plays the coordinator passed to spawn_scheduler (rank_up / rank_down go there).
  std::string data_endpoint;
};

struct scheduler_state {
  std::optional<worker_registry> registry;     // engaged by the behavior function
  std::vector<runtime::worker_actor> workers;  // by rank; invalid when not live
  runtime::coordinator_actor coordinator;
  std::string data_endpoint;  // scheduler_options::data_endpoint
  std::shared_ptr<output_queue> outputs;
  runtime::output_sink_actor engine;  // subscribed engine (engine_hello): outputs go there
  std::vector<caf::typed_response_promise<uint32_t>> ready_waiters;
  std::vector<caf::typed_response_promise<uint32_t>> stop_waiters;
  bool stopping = false;  // stop was requested: no new registrations
  uint32_t stopped = 0;   // workers sent exit by stop
  static inline const char* name = "kvc.scheduler";
};

/// Spawns the scheduler. With `coordinator` invalid it spawns and links its own from
/// opts.coordinator. Outputs go to `outputs`. Error (invalid_argument), nothing spawned: an
/// invalid handshake expectation (runtime::validate_expectation), invalid coordinator options
/// (tick interval <= 0, negative timeout or grace), or no output queue.
result<scheduler_impl> spawn_scheduler(caf::actor_system& sys, const scheduler_options& opts,
                                       std::shared_ptr<output_queue> outputs,
                                       runtime::coordinator_actor coordinator = {});

}  // namespace kvc::scheduler
