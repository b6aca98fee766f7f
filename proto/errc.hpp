#pragma once
/// The one error vocabulary of kvconnect. Values are stable: they cross process boundaries
/// (CAF messages, completion events, shm headers). Append new codes; never renumber.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvc {

enum class errc : uint8_t {
  ok = 0,
  invalid_argument = 1,     ///< malformed input: config, message, id, JSON line
  not_found = 2,            ///< a key, job, rank or segment that does not exist
  not_ready = 3,            ///< the object exists but is in the wrong state (pending store, ...)
  precondition_failed = 4,  ///< a call that breaks the caller's contract (load not in flight, ...)
  capacity_exhausted = 5,   ///< not enough free or evictable space
  unknown_policy = 6,       ///< an eviction policy name we do not know
  device_unavailable = 7,   ///< no GPU / driver, or a backend not built in
  device_error = 8,         ///< a copy or device call failed
  shm_error = 9,            ///< creating, mapping or removing a shared-memory segment failed
  layout_mismatch = 10,     ///< a segment or KV layout of another shape
  protocol_mismatch = 11,   ///< handshake refused: version, token, topology
  timeout = 12,             ///< a deadline passed
  io_error = 13,            ///< files, sockets, processes
  injected_fault = 14,      ///< a failure produced on purpose by a fault plan
  internal = 15,            ///< a broken invariant inside kvconnect
};
/// How many codes there are (the last one + 1).
inline constexpr size_t errc_count = static_cast<size_t>(errc::internal) + 1;

/// Stable lower-case name of a code, e.g. "invalid_argument".
std::string_view to_string(errc e) noexcept;

}  // namespace kvc
