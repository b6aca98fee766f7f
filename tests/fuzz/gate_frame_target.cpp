// Fuzz target: the gate's pre-handshake read (actors/control/gate.hpp, auth_reader). The first
// byte picks the token's length, the second how the rest is cut into pieces; the verdict must
// be "admitted" exactly when the first auth_frame_bytes bytes are the token's frame.
#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "actors/control/gate.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

int gate_frame(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string token =
      std::string("0123456789abcdef").substr(0, 1 + data[0] % 16);  // 1 to 16 bytes
  const size_t piece = 1 + data[1] % 80;
  const char* bytes = reinterpret_cast<const char*>(data + 2);
  const size_t n = size - 2;

  control::auth_reader reader;
  auto verdict = control::auth_reader::verdict::incomplete;
  size_t consumed = 0;
  for (size_t off = 0; off < n; off += piece) {
    const size_t len = std::min(piece, n - off);
    const size_t missing = reader.missing();
    size_t taken = 0;
    verdict = reader.feed({bytes + off, len}, token, taken);
    KVC_FUZZ_CHECK(taken == std::min(len, missing));
    KVC_FUZZ_CHECK(reader.missing() == missing - taken);
    consumed += taken;
  }
  KVC_FUZZ_CHECK(consumed == std::min(n, control::auth_frame_bytes));
  if (n < control::auth_frame_bytes) {
    KVC_FUZZ_CHECK(verdict == control::auth_reader::verdict::incomplete);
    return 0;
  }
  const auto want = *control::make_auth_frame(token);
  const bool same = std::memcmp(want.data(), bytes, control::auth_frame_bytes) == 0;
  KVC_FUZZ_CHECK(verdict == (same ? control::auth_reader::verdict::admitted
                                  : control::auth_reader::verdict::refused));
  return 0;
}

}  // namespace kvc::fuzz
