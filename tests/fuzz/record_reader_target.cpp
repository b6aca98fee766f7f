// Fuzz target: the run-record reader (actors/record/record_reader.hpp). Whatever the bytes, it
// answers a record or one error, never allocating beyond what the bytes can describe; a record
// that reads must encode back to bytes that read as the same record, and replaying it must
// not crash (a divergence or a config error is a normal answer).
#include <span>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_reader.hpp"
#include "actors/record/replayer.hpp"
#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

int record_reader(const uint8_t* data, size_t size) {
  const std::span<const char> bytes{reinterpret_cast<const char*>(data), size};
  auto rec = record::read_record(bytes);
  if (!rec) {
    KVC_FUZZ_CHECK(!rec.error().message().empty());
    return 0;
  }
  const std::string again = record::encode_record(*rec);
  auto back = record::read_record(again);
  KVC_FUZZ_CHECK(back.ok());
  KVC_FUZZ_CHECK(back->events.size() == rec->events.size());
  KVC_FUZZ_CHECK(record::encode_record(*back) == again);
  // Replays only small pools: a fuzzed capacity of millions of slots is slow, not a finding.
  if (rec->header.config.planner.manager.capacity <= 4096) (void)record::replay(*rec, {});
  return 0;
}

}  // namespace kvc::fuzz
