#pragma once
/// line_reader: the replays' input (`kvconnect replay`, `replay --connector`) as bounded lines.
/// A byte_source is a stream of bytes (a file, stdin, a decompressed file; open_byte_source,
/// byte_source_zlib.cpp or byte_source_plain.cpp by the build); line_reader splits it into lines
/// of at most max_line_bytes. Not thread-safe.
#include <algorithm>
#include <cstddef>
#include <memory>
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

}  // namespace kvc::launch
