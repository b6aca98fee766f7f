#pragma once
/// The offload manager's replay (`kvconnect replay`): JSON lines in, one op per line, one answer
/// line per op out (the protocol of docs and tests/scheduler/replay/). A bad line gets
/// {"error": "..."} (at most 300 bytes of message, invalid UTF-8 replaced) and changes nothing;
/// the replay goes on. Kept apart from the command so that the fuzz target and the tests drive
/// the same code. Not thread-safe.
#include <ostream>

#include "launch/replay/line_reader.hpp"

namespace kvc::launch {

/// Runs a whole replay; true if every line succeeded. Lines are bounded (max_line_bytes): a
/// longer one gets one error line and the replay goes on; a read error ends it with one.
bool replay_manager_ops(byte_source& in, std::ostream& out);

}  // namespace kvc::launch
