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
/// Input is read through a byte_source: plain or gzip (through zlib when the build has it).
/// Lines are bounded (max_line_bytes); a longer or malformed line gets one error line and the
/// replay goes on. Not thread-safe.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

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

/// Splits a byte_source into lines of at most max_line_bytes (the rest of a longer line is
/// skipped and reported).
class line_reader {
 public:
  explicit line_reader(byte_source& in) : in_(in), buf_(64 * 1024) {}

  enum class kind { line, too_long, end, failed };

  kind next(std::string& line, status& error) {
    line.clear();
    bool too_long = false;
    bool any = false;
    for (;;) {
      if (pos_ == len_) {
        auto n = in_.read(buf_.data(), buf_.size());
        if (!n) {
          error = n.error();
          return kind::failed;
        }
        pos_ = 0;
        len_ = *n;
        if (len_ == 0) return any ? (too_long ? kind::too_long : kind::line) : kind::end;
      }
      any = true;
      const char* begin = buf_.data() + pos_;
      const char* end = buf_.data() + len_;
      const char* nl = std::find(begin, end, '\n');
      const size_t take = static_cast<size_t>(nl - begin);
      if (!too_long) {
        if (line.size() + take > max_line_bytes) {
          too_long = true;
          line.clear();
        } else {
          line.append(begin, take);
        }
      }
      pos_ += take;
      if (nl != end) {
        ++pos_;
        return too_long ? kind::too_long : kind::line;
      }
    }
  }

 private:
  byte_source& in_;
  std::vector<char> buf_;
  size_t pos_ = 0;
  size_t len_ = 0;
};

/// Replays every line of `in`, writing answer and error lines to `out`. True iff no line failed.
bool replay_connector_trace(byte_source& in, std::ostream& out);

}  // namespace kvc::launch
