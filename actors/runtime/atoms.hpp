#pragma once
/// The atoms of kvconnect's CAF messages. An atom's text travels over the wire and tags a
/// message's meaning where the payload types alone are ambiguous. At most 10 characters from
/// [0-9A-Za-z_ ] (CAF silently turns any other character into a blank); every text starts with
/// "kvc_" so that it can never collide with CAF's own atoms ("tick", "join", "get", ...).
#include <caf/atom.hpp>

namespace kvc::runtime {

/// (report, rank, incarnation, step, events): a rank's completion reports of one step.
using report_atom = caf::atom_constant<caf::atom("kvc_report")>;
/// (expect, step, load job ids, store job ids): the scheduler planned these jobs in a step.
using expect_atom = caf::atom_constant<caf::atom("kvc_expect")>;
/// (rank_up, rank, incarnation): a rank (re)started with this incarnation.
using rank_up_atom = caf::atom_constant<caf::atom("kvc_rankup")>;
/// (rank_down, rank): a rank is gone.
using rank_down_atom = caf::atom_constant<caf::atom("kvc_rankdn")>;
/// (hello, worker_registration, worker): a worker registers with the scheduler.
using hello_atom = caf::atom_constant<caf::atom("kvc_hello")>;
/// (engine, registration, sink) -> world size: an engine's scheduler thread authenticates with
/// a `kvconnect scheduler` process and subscribes `sink` to its step outputs.
using engine_hello_atom = caf::atom_constant<caf::atom("kvc_engine")>;
/// (submit, connector_metadata): the subscribed engine hands one step to fan out.
using submit_atom = caf::atom_constant<caf::atom("kvc_submit")>;
/// (ready) -> world size, once every rank has a live worker.
using ready_atom = caf::atom_constant<caf::atom("kvc_ready")>;
/// (tick): an actor's own periodic timer (deadlines). Never sent by another actor.
using tick_atom = caf::atom_constant<caf::atom("kvc_tick")>;

/// The category of kvc::errc inside a caf::error (see error_bridge.hpp).
inline constexpr caf::atom_value error_category = caf::atom("kvc");

}  // namespace kvc::runtime
