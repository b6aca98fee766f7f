#pragma once
/// tracer: where a process's trace records go. The hosts (embed/scheduler_host, rank_host) open
/// one when observe.trace is not off and hand it to the step channel's recording decorator
/// (traced_transport.hpp), the scheduler actor's control handlers and the facades; when trace is
/// off there is no tracer at all (a null pointer), so nothing is recorded and nothing checked
/// per message beyond that pointer.
///
/// open() writes `<dir>/<role>-<pid>-<tag>.jsonl` (mode 0600; the directory, when open()
/// creates it, 0700: proto/private_files.hpp), one JSON object per line
/// (trace_record.hpp), through an spdlog async logger with a thread pool of its own (a full
/// queue blocks the writer rather than losing records). emit() only moves the record into a
/// batch of 256; a full batch wakes the logger's thread, which formats and writes it (no
/// formatting, message-id strings or file writes on the emitting thread). The file is complete
/// once the tracer is destroyed; a process killed before that loses its last batch. Tests hand
/// a sink of their own to the constructor.
///
/// Thread-safe: every thread of a process may emit through one tracer.
#include <cstdint>
#include <memory>
#include <string>

#include "actors/trace/trace_record.hpp"
#include "proto/status.hpp"

namespace kvc::trace {

/// Takes finished records. Implementations must be thread-safe.
class trace_sink {
 public:
  virtual ~trace_sink() = default;
  virtual void write(const trace_record& r) = 0;
  /// The tracer's way in: the record is the sink's to keep (no copy). By default, write(r).
  virtual void take(trace_record&& r) { write(r); }
};

class tracer {
 public:
  /// errc::invalid_argument for level off or an empty dir; errc::io_error when the directory or
  /// the file cannot be made.
  static result<std::shared_ptr<tracer>> open(trace_level level, const std::string& dir,
                                              std::string role, const std::string& tag,
                                              uint32_t node);

  tracer(trace_level level, std::shared_ptr<trace_sink> sink, std::string role, uint32_t node);

  trace_level level() const noexcept { return level_; }
  bool jobs() const noexcept { return level_ >= trace_level::jobs; }
  /// The file open() writes; empty for a sink of the caller's.
  const std::string& path() const noexcept { return path_; }

  /// Fills what the caller left at its default (times: now; node, pid, role: this process's)
  /// and writes the record.
  void emit(trace_record r);
  /// steady_clock now, in the records' unit.
  static int64_t mono_now() noexcept;

 private:
  trace_level level_;
  std::shared_ptr<trace_sink> sink_;
  std::string role_;
  uint32_t node_;
  int64_t pid_;
  std::string path_;
};

}  // namespace kvc::trace
