#pragma once
/// `kvconnect replay --connector`: replays a connector trace recorded from vLLM R1's
/// OffloadingConnectorScheduler (tests/scheduler/connector_traces/README.md) through kvconnect's
/// planner (scheduler::planner over its own offload manager), printing one answer
/// line per connector-call line. docs/planner.md describes the comparison.
///
/// The worker's part is played here, not by the planner: jobs complete when the trace's
/// finished_sending / finished_recving lists say so (request-level outcomes), and a preempted
/// request's flushed store jobs complete right after build_connector_meta (R1 completes them
/// inside that call). The trace's `out`, `calls` and `state` fields are never read: they are
/// what a replay is checked against.
///
/// Input is read through a byte_source (line_reader.hpp): plain or gzip (through zlib when the
/// build has it). Lines are bounded (max_line_bytes); a longer or malformed line gets one error
/// line and the replay goes on. Not thread-safe.
#include <ostream>

#include "launch/replay/line_reader.hpp"

namespace kvc::launch {

/// Replays every line of `in`, writing answer and error lines to `out`. True iff no line failed.
bool replay_connector_trace(byte_source& in, std::ostream& out);

}  // namespace kvc::launch
