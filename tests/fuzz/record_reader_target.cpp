// Fuzz target: the run-record reader (actors/record/record_reader.hpp). Whatever the bytes, it
// answers a record or one error, never allocating beyond what the bytes can describe; a record
// that reads must encode back to bytes that read as the same record, and replaying it must
// not crash (a divergence or a config error is a normal answer). Each input is read as it came
// and again with its frames' checksums made right, so that the decoders behind the checksums
// are reached.
#include <span>
#include <string>
#include <string_view>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_reader.hpp"
#include "actors/record/replayer.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

namespace {

/// `bytes` with the checksum of every whole frame made right: without it almost no mutation
/// gets past the checksums to the decoders behind them.
std::string with_checksums_made_right(std::span<const char> bytes) {
  std::string out{bytes.data(), bytes.size()};
  size_t at = record::record_magic.size();
  while (out.size() - at >= record::record_frame_overhead) {
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= uint32_t{static_cast<uint8_t>(out[at + i])} << (8 * i);
    if (len > out.size() - at - record::record_frame_overhead) break;
    const auto sum = record::le32(record::seal_record_frame(out.data() + at, len));
    out.replace(at + 4 + len, sum.size(), sum.data(), sum.size());
    at += record::record_frame_overhead + len;
  }
  return out;
}

void check(std::span<const char> bytes) {
  auto rec = record::read_record(bytes);
  if (!rec) {
    KVC_FUZZ_CHECK(!rec.error().message().empty());
    return;
  }
  const std::string again = record::encode_record(*rec);
  auto back = record::read_record(again);
  KVC_FUZZ_CHECK(back.ok());
  KVC_FUZZ_CHECK(back->events.size() == rec->events.size());
  KVC_FUZZ_CHECK(record::encode_record(*back) == again);
  // Replays only small pools: a fuzzed capacity of millions of slots is slow, not a finding.
  if (rec->header.config.planner.manager.capacity <= 4096) (void)record::replay(*rec, {});
}

}  // namespace

int record_reader(const uint8_t* data, size_t size) {
  const std::span<const char> bytes{reinterpret_cast<const char*>(data), size};
  check(bytes);
  if (size >= record::record_magic.size()) {
    const std::string sealed = with_checksums_made_right(bytes);
    if (sealed != std::string_view{bytes.data(), bytes.size()}) check(sealed);
  }
  return 0;
}

}  // namespace kvc::fuzz
