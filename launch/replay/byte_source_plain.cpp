// open_byte_source without zlib: plain input only; gzip input is refused with the command that
// replays it (zcat FILE | kvconnect replay --connector -).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "launch/replay/line_reader.hpp"

namespace kvc::launch {
namespace {

class file_source final : public byte_source {
 public:
  file_source(std::FILE* f, bool owned, std::string name)
      : f_(f), owned_(owned), name_(std::move(name)) {}
  ~file_source() override {
    if (owned_) std::fclose(f_);
  }
  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;

  result<size_t> read(char* buf, size_t n) override {
    const size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_)) return make_error(errc::io_error, name_ + ": read failed");
    if (first_ && got >= 2 && static_cast<unsigned char>(buf[0]) == 0x1f &&
        static_cast<unsigned char>(buf[1]) == 0x8b)
      return make_error(errc::invalid_argument,
                        name_ + " is gzip and this build has no zlib: run zcat " + name_ +
                            " | kvconnect replay --connector -");
    first_ = false;
    return got;
  }

 private:
  std::FILE* f_;
  bool owned_;
  std::string name_;
  bool first_ = true;
};

}  // namespace

result<std::unique_ptr<byte_source>> open_byte_source(const std::string& path) {
  if (path == "-")
    return std::unique_ptr<byte_source>(std::make_unique<file_source>(stdin, false, "stdin"));
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr)
    return make_error(errc::io_error, "cannot open " + path + ": " + std::strerror(errno));
  return std::unique_ptr<byte_source>(std::make_unique<file_source>(f, true, path));
}

}  // namespace kvc::launch
