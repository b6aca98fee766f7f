#pragma once
/// The typed messaging interfaces of kvconnect's control plane (CAF): registration,
/// supervision and stop. A step's own messages do not travel here but on the step channel
/// (actors/channel/). One alias per role; each actor is handed only what it sends to.
///
/// Across processes CAF compares these interfaces by the *registered names* of their types:
/// both sides must have called kvc::control::add_message_types (system_config.hpp), and a
/// client's interface must be a subset of the published actor's.
#include <cstdint>
#include <string>

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/control/atoms.hpp"
#include "proto/ids.hpp"
#include "proto/registration.hpp"

namespace kvc::control {

/// One rank's actor (its identity on the control plane): the scheduler monitors it and stops
/// it when the deployment stops.
using worker_actor = caf::typed_actor<caf::reacts_to<stop_atom>>;

/// The coordinator: hears of ranks arriving and leaving, from the scheduler actor, in the order
/// it decided them (rank_down of an incarnation always before rank_up of the next).
using coordinator_actor = caf::typed_actor<
    // A rank is alive with this incarnation (a higher one: it restarted).
    caf::reacts_to<rank_up_atom, rank_id, uint32_t /*incarnation*/>,
    // A rank is gone: the jobs waiting on it fail.
    caf::reacts_to<rank_down_atom, rank_id>>;

/// The scheduler actor as workers see it: registration. The reply names the coordinator and
/// the step channel's endpoint the rank connects to (empty: the rank is in the scheduler's
/// process and connects in-process). A refusal is an error saying why
/// (actors/scheduler/handshake.hpp).
using scheduler_actor = caf::typed_actor<
    caf::replies_to<hello_atom, worker_registration, worker_actor>::with<coordinator_actor,
                                                                          std::string>>;

}  // namespace kvc::control
