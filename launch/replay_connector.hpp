#pragma once
/// `kvconnect replay --connector`: replays a connector trace recorded from vLLM R1's
/// OffloadingConnectorScheduler (shared/reference/connector_trace_format.md) through kvconnect's
/// planner (scheduler::planner over its own offload manager), printing one answer
/// line per connector-call line. docs/planner.md describes the comparison.
///
/// The worker's part is played here, not by the planner: jobs complete when the trace's
/// finished_sending / finished_recving lists say so (request-level outcomes), and a preempted
/// request's flushed store jobs complete right after build_connector_meta (R1 completes them
/// inside that call). The trace's `out`, `calls` and `state` fields are never read: they are
/// what a replay is checked against.
///
/// Input is read through a byte_source: plain or gzip (through zlib when the build has it).
/// Lines are bounded (max_line_bytes); a longer or malformed line gets one error line and the
/// replay goes on. Not thread-safe.
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>

#include "proto/status.hpp"

namespace kvc::launch {

/// A stream of bytes (a file, stdin, a decompressed file). Not thread-safe.
class byte_source {
 public:
  virtual ~byte_source() = default;
  /// Up to `n` bytes into `buf`: the count, 0 at the end, or an error.
  virtual result<size_t> read(char* buf, size_t n) = 0;
};

/// Opens `path` ("-": stdin). Gzip input is decompressed when the build has zlib; otherwise a
/// gzip file is an error that says to pipe it through `zcat`.
result<std::unique_ptr<byte_source>> open_byte_source(const std::string& path);

/// Longest input line accepted (the traces' longest is a few KiB).
inline constexpr size_t max_line_bytes = size_t{1} << 20;

/// Replays every line of `in`, writing answer and error lines to `out`. True iff no line failed.
bool replay_connector_trace(byte_source& in, std::ostream& out);

}  // namespace kvc::launch
