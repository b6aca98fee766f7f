#pragma once
/// The typed messaging interfaces of kvconnect's actors, as type aliases (one per role). A
/// handle of a larger interface converts to a smaller one, so each actor is handed only what it
/// sends to: the coordinator gets an output_sink_actor, which a scheduler_actor is.
///
/// Across processes CAF compares these interfaces by the *registered names* of their types:
/// both sides must have called kvc::runtime::add_message_types (system_config.hpp), and a
/// client's interface must be a subset of the published actor's.
#include <cstdint>
#include <string>
#include <vector>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/runtime/atoms.hpp"
#include "actors/runtime/handshake.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"

namespace kvc::runtime {

/// Consumes aggregated step outputs (the coordinator's view of the scheduler).
using output_sink_actor = caf::typed_actor<caf::reacts_to<connector_output>>;

/// One rank's worker: one connector_metadata per engine step.
using worker_actor = caf::typed_actor<caf::reacts_to<connector_metadata>>;

/// Aggregates completion reports of all ranks; sends one connector_output per step to its sink.
using coordinator_actor = caf::typed_actor<
    // A rank's reports of one step (possibly none); closes that step for the rank. Each rank
    // sends exactly one per step, in step order, after registering its incarnation.
    caf::reacts_to<report_atom, rank_id, uint32_t /*incarnation*/, step_id,
                   std::vector<completion_event>>,
    // The scheduler planned these jobs in `step` (sent before the step's metadata).
    caf::reacts_to<expect_atom, step_id, std::vector<job_id> /*loads*/,
                   std::vector<job_id> /*stores*/>,
    // A rank is alive with this incarnation (a higher one: it restarted).
    caf::reacts_to<rank_up_atom, rank_id, uint32_t /*incarnation*/>,
    // A rank is gone: the jobs waiting on it fail.
    caf::reacts_to<rank_down_atom, rank_id>>;

/// The scheduler: consumes step outputs and registers workers. The reply names the coordinator
/// the worker reports to and the data-plane endpoint: empty, the step's metadata and reports
/// travel as the CAF messages here; else a ZeroMQ endpoint (tcp://host:port) where the worker
/// takes its metadata and sends its reports (runtime/data_plane.hpp). A refusal is an error
/// saying why, see handshake.hpp.
using scheduler_actor = output_sink_actor::extend<
    caf::replies_to<hello_atom, worker_registration, worker_actor>::with<coordinator_actor,
                                                                          std::string>>;

/// What a `kvconnect scheduler` process publishes: the workers' interface plus the engine's.
/// An engine's scheduler thread (embed::scheduler_connector, connect mode) authenticates with a
/// registration carrying the shared token (validated like rank 0's, see handshake.hpp) and
/// subscribes its sink to the step outputs (one engine at a time; refusals are kvc errors),
/// then submits each step's metadata for fan-out (ignored unless sent by the subscriber).
using scheduler_service_actor = scheduler_actor::extend<
    caf::replies_to<engine_hello_atom, worker_registration, output_sink_actor>::with<uint32_t>,
    caf::reacts_to<submit_atom, connector_metadata>,
    caf::replies_to<ready_atom>::with<uint32_t>>;

}  // namespace kvc::runtime
