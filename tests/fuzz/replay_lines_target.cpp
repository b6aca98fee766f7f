// Fuzz target: the replay's line protocol (launch/replay/replay_session.hpp). Whatever the bytes,
// every line that is not blank gets exactly one answer line, and each answer is valid JSON.
#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "launch/replay/replay_session.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

namespace {

/// The fuzzer's bytes as an input file, handed out in pieces of at most 7 bytes (lines cross
/// the line reader's reads).
class bytes_source final : public launch::byte_source {
 public:
  bytes_source(const char* data, size_t size) : data_(data), size_(size) {}
  result<size_t> read(char* buf, size_t n) override {
    const size_t k = std::min({n, size_ - pos_, size_t{7}});
    std::memcpy(buf, data_ + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

int replay_lines(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  size_t answerable = 0;  // lines with a byte other than blanks
  for (size_t begin = 0; begin < size;) {
    const char* nl = static_cast<const char*>(std::memchr(text + begin, '\n', size - begin));
    const size_t end = nl ? static_cast<size_t>(nl - text) : size;
    const std::string_view line{text + begin, end - begin};
    if (line.find_first_not_of(" \t\r\n") != std::string_view::npos) ++answerable;
    begin = end + 1;
  }
  bytes_source in{text, size};
  std::ostringstream out;
  (void)launch::replay_manager_ops(in, out);
  std::istringstream answers{out.str()};
  size_t count = 0;
  for (std::string a; std::getline(answers, a); ++count) {
    KVC_FUZZ_CHECK(nlohmann::json::accept(a));
  }
  KVC_FUZZ_CHECK(count == answerable);
  return 0;
}

}  // namespace kvc::fuzz
