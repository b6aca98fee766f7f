// open_byte_source with zlib: gzip input is decompressed, plain input passes through unchanged
// (zlib reads both).
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include "launch/replay/line_reader.hpp"

namespace kvc::launch {
namespace {

class gz_source final : public byte_source {
 public:
  gz_source(gzFile f, std::string name) : f_(f), name_(std::move(name)) {}
  ~gz_source() override { gzclose(f_); }
  gz_source(const gz_source&) = delete;
  gz_source& operator=(const gz_source&) = delete;

  result<size_t> read(char* buf, size_t n) override {
    const int got = gzread(f_, buf, static_cast<unsigned>(std::min<size_t>(n, INT_MAX)));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      return make_error(errc::io_error, name_ + ": " + (msg ? msg : "read failed"));
    }
    return static_cast<size_t>(got);
  }

 private:
  gzFile f_;
  std::string name_;
};

}  // namespace

result<std::unique_ptr<byte_source>> open_byte_source(const std::string& path) {
  gzFile f = nullptr;
  if (path == "-") {
    const int fd = dup(STDIN_FILENO);
    if (fd >= 0) f = gzdopen(fd, "rb");
    if (f == nullptr && fd >= 0) close(fd);
  } else {
    f = gzopen(path.c_str(), "rb");
  }
  if (f == nullptr)
    return make_error(errc::io_error, "cannot open " + (path == "-" ? std::string{"stdin"} : path) +
                                          ": " + std::strerror(errno));
  gzbuffer(f, 128 * 1024);
  return std::unique_ptr<byte_source>(std::make_unique<gz_source>(f, path));
}

}  // namespace kvc::launch
