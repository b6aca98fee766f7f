#pragma once
/// One trace record: something one process saw happen to a message or a job, written as one
/// JSON object per line into the process's trace file (tracer.hpp). `kvconnect trace export` /
/// `summary` read these files back (launch/trace/trace_file.hpp).
///
/// A record is an event at one time (`mono_ns`, with `wall_ns` beside it) or, with `dur_ns`
/// > 0, a span that began `dur_ns` before it (a handler, a copy job). `msg` links a send to its
/// receive: both ends derive the same id from what they both know (kind, step, the rank's
/// routing id), so the wire format carries nothing extra.
///
/// Plain data and pure functions; thread-safe.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "proto/status.hpp"

namespace kvc::trace {

/// How much a process records: nothing, every message (step channel and control plane), or
/// messages plus one record per copy job at the workers.
enum class trace_level : uint8_t { off = 0, messages = 1, jobs = 2 };

std::string_view to_string(trace_level l) noexcept;
/// "off", "messages", "jobs"; errc::invalid_argument otherwise.
result<trace_level> parse_trace_level(std::string_view s);

enum class direction : uint8_t {
  send = 0,     ///< a message left this process
  receive = 1,  ///< a message arrived
  local = 2,    ///< no message: a handler's span, a job, a state change
};

std::string_view to_string(direction d) noexcept;

struct trace_record {
  int64_t wall_ns = 0;  ///< system_clock since the epoch
  int64_t mono_ns = 0;  ///< steady_clock of the writing process
  int64_t dur_ns = 0;   ///< > 0: a span [mono_ns - dur_ns, mono_ns]
  uint32_t node = 0;
  int64_t pid = 0;
  std::string role;   ///< the process's role: "scheduler", "worker"
  std::string track;  ///< the thread of work inside it: "scheduler", "rank 3"
  direction dir = direction::local;
  std::string type;     ///< "metadata", "report", "hello", "registration", "rank_up", ...
  int64_t step = -1;    ///< -1: none
  int64_t rank = -1;    ///< the rank the message is from / to; -1: none
  int64_t job = -1;     ///< -1: none (job ids start at 0)
  std::string request;  ///< empty: none
  uint64_t bytes = 0;
  std::string msg;     ///< links a send to its receive; empty for local records
  /// With `msg` empty, a send or receive with a rank and this incarnation (>= 0) gets the id
  /// message_id(type, step, "r<rank>.<incarnation>") when its line is written: the threads that
  /// emit build no string for it.
  int64_t incarnation = -1;
  int64_t value = -1;  ///< a counter's value (jobs in flight, ...); -1: none
  std::string note;    ///< an outcome ("ok", an error), free text
};

/// The record as one line of JSON (no newline).
std::string to_json_line(const trace_record& r);
/// The same line appended to `out`.
void append_json_line(std::string& out, const trace_record& r);
/// The record's message id as its line carries it: `msg`, or the one built from type, step,
/// rank and incarnation (see trace_record::incarnation); empty for none.
std::string message_id_of(const trace_record& r);

/// The id both ends of a step-channel or control message derive. `peer` is the rank's routing
/// id ("r<rank>.<incarnation>"); a step of -1 is left out.
std::string message_id(std::string_view type, int64_t step, std::string_view peer);

}  // namespace kvc::trace
