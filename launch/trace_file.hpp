#pragma once
/// trace_file: reads the trace files a run wrote (tracer.hpp: `<dir>/*.jsonl`, one JSON object
/// per line) back into trace_records, each tagged with the process it came from, for
/// `kvconnect trace export` and `trace summary`.
///
/// A line that is not a record (not JSON, a field of the wrong type, no type or time) is one
/// error naming the file and line; nothing is read past it. A file's last line may be cut short
/// by a process that was killed while writing: that one line is skipped and counted.
///
/// Free functions; thread-safe.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "actors/trace/trace_record.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

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
