#pragma once
/// The atoms of kvconnect's CAF messages. An atom's text travels over the wire and tags a
/// message's meaning where the payload types alone are ambiguous. At most 10 characters from
/// [0-9A-Za-z_ ] (CAF silently turns any other character into a blank); every text starts with
/// "kvc_" so that it can never collide with CAF's own atoms ("tick", "join", "get", ...).
#include <caf/atom.hpp>

namespace kvc::control {

/// (rank_up, rank, incarnation): a rank (re)started with this incarnation.
using rank_up_atom = caf::atom_constant<caf::atom("kvc_rankup")>;
/// (rank_down, rank): a rank is gone.
using rank_down_atom = caf::atom_constant<caf::atom("kvc_rankdn")>;
/// (hello, worker_registration, worker): a worker registers with the scheduler.
using hello_atom = caf::atom_constant<caf::atom("kvc_hello")>;
/// (ready) -> world size, once every rank has a live worker.
using ready_atom = caf::atom_constant<caf::atom("kvc_ready")>;
/// (stop): to the scheduler, -> workers stopped once all are down; to a worker: end.
using stop_atom = caf::atom_constant<caf::atom("kvc_stop")>;

/// The category of kvc::errc inside a caf::error (see error_bridge.hpp).
inline constexpr caf::atom_value error_category = caf::atom("kvc");

}  // namespace kvc::control
