#pragma once
/// trace_file: reads the trace files a run wrote (tracer.hpp: `<dir>/*.jsonl`, one JSON object
/// per line) back into trace_records, each tagged with the process it came from, for
/// `kvconnect trace export` and `trace summary`.
///
/// A line that is not a record (not JSON, a field of the wrong type, no type or time, a value
/// out of its field's range) is one error naming the file and line; nothing is read past it.
/// Values are never wrapped: times and durations lie in [0, max_trace_ns], counters in their
/// type's range (-1: none). A process's wall clock may not jump by more than
/// max_wall_clock_step against its monotonic clock from one record to another: a record that
/// does is refused (one of the two times is not one the process wrote; it would shift the
/// whole process in the export). A file's last line may be cut short by a process that was
/// killed while writing: that one line is skipped and counted. A trace file that cannot be read
/// (a symlink loop, no permission) is one error naming it.
///
/// Free functions; thread-safe.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/trace/trace_record.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// The largest time or duration a record may carry: 2^62 - 1 ns (146 years from the clock's
/// zero, the year 2116 on the wall clock), far beyond any clock a tracer reads, and what keeps
/// the readers' sums and differences of times within 64 bits.
inline constexpr int64_t max_trace_ns = (int64_t{1} << 62) - 1;
/// How far a process's wall clock may step against its monotonic clock during a run (a day).
inline constexpr int64_t max_wall_clock_step = int64_t{24} * 3600 * 1000 * 1000 * 1000;

/// A record and the process it came from (an index into trace_set::processes).
struct traced_record {
  trace::trace_record record;
  uint32_t process = 0;
};

/// One process of the run: a (node, pid) pair; several files of one process (ranks of the
/// scheduler's process) are one process.
struct traced_process {
  uint32_t node = 0;
  int64_t pid = 0;
  std::string role;  ///< the role of its first file ("scheduler" before "worker")
};

struct trace_set {
  std::vector<traced_process> processes;
  std::vector<traced_record> records;  ///< file by file, in each file's order
  uint64_t cut_lines = 0;              ///< last lines cut short and skipped
};

/// One line as a record; errc::invalid_argument naming what is wrong.
result<trace::trace_record> parse_record(std::string_view line);

/// Every `*.jsonl` file in `dir` (sorted by name). errc::not_found for a directory without
/// trace files, errc::io_error when it cannot be read, errc::invalid_argument for a bad line.
result<trace_set> read_trace_dir(const std::string& dir);

}  // namespace kvc::launch
