// Fuzz target: the step channel's frame decoder (actors/channel/wire_codec.hpp). The input is a
// frame without its CRC-32 trailer: the target decodes it as it came (nearly always refused by
// the checksum) and sealed with a correct trailer, so the fuzzer reaches the payload decoding
// behind the checksum. A frame that decodes must survive encode + decode unchanged (as a value:
// CAF reads any non-zero byte as `true`, so the bytes need not be the same).
#include <span>

#include "actors/channel/wire_codec.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

namespace {

template <class Decoded, class Decode>
void same_value_again(const Decoded& value, Decode decode) {
  const channel::wire_bytes again = channel::encode(value);
  auto back = decode(std::span<const char>{again});
  KVC_FUZZ_CHECK(back.ok());
  KVC_FUZZ_CHECK(*back == value);
}

void decode_every_way(std::span<const char> frame) {
  auto kind = channel::kind_of(frame);
  KVC_FUZZ_CHECK(kind.ok() == (!frame.empty() && frame[0] >= 1 && frame[0] <= 3));
  // Every decoder sees every frame: a decoder must refuse another kind's tag, not misread it.
  auto hello = channel::decode_hello(frame);
  auto meta = channel::decode_metadata(frame);
  auto report = channel::decode_report(frame);
  KVC_FUZZ_CHECK(int{hello.ok()} + int{meta.ok()} + int{report.ok()} <= 1);
  if (hello) same_value_again(*hello, channel::decode_hello);
  if (meta) same_value_again(*meta, channel::decode_metadata);
  if (report) same_value_again(*report, channel::decode_report);
}

}  // namespace

int wire_codec(const uint8_t* data, size_t size) {
  const std::span<const char> raw{reinterpret_cast<const char*>(data), size};
  decode_every_way(raw);
  channel::wire_bytes sealed{raw.begin(), raw.end()};
  channel::seal_frame(sealed);
  decode_every_way(sealed);
  return 0;
}

}  // namespace kvc::fuzz
