// Run records (actors/record/): every event kind survives encode + decode, the reader refuses
// bad bytes with one clear error before allocating (magic, over-long or truncated frames, a
// frame failing its checksum: every corrupted byte; another schema, an older record included;
// a config that does not match its digest), and the replayer re-drives fresh cores: identical
// digests pass, a changed one is reported with its step and field.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_reader.hpp"
#include "actors/record/recorder.hpp"
#include "actors/record/replayer.hpp"

namespace kvc::record {
namespace {

recorded_config small_config() {
  recorded_config c;
  c.planner.gpu_block_size = 16;
  c.planner.manager.capacity = 8;
  c.coordinator.world_size = 2;
  c.coordinator.job_timeout = std::chrono::milliseconds{100};
  c.coordinator.job_timeout_steps = 20;
  return c;
}

recorded_request req(const std::string& id) {
  return {id, {block_key::from_index(1), block_key::from_index(2)}, 32, false};
}

std::vector<record_event> every_kind() {
  build_event b;
  b.step = 3;
  b.new_requests.push_back({req("a"), {4, 5}, 0, 32, false});
  b.preempted = {"z"};
  b.ok = true;
  b.digest.fields = {1, 2, 3, 4, 5, 6, 7};
  step_report r{1, 0, 3, {{1, 0, 7, 3, 9, transfer_kind::store, true, errc::ok, 4096, 0.25, ""},
                          {1, 0, 8, 3, 10, transfer_kind::load, false, errc::device_error, 0, 0.5,
                           "cudaEventQuery returned cudaErrorIllegalAddress (700)"}}};
  return {match_event{req("a"), 16, 32},
          match_event{req("b"), 0, std::nullopt},
          alloc_event{req("a"), {4, 5}, true, {1, 0}, 16, true},
          b,
          finished_event{"a", true},
          request_output_event{{"a"}, {"b", "c"}},
          request_output_event{{"d"}, {}, scheduler::request_output_role::releases_requests, {9}},
          take_completions_event{},
          expect_event{3, 123456789},
          report_event{r},
          rank_up_event{1, 2},
          rank_down_event{1},
          tick_event{987654321},
          poll_event{true, {{11, 12}}},
          reset_event{true}};
}

TEST(RecordCodec, EveryEventKindRoundTrips) {
  event_encoder enc, again;
  event_decoder dec;
  for (const record_event& e : every_kind()) {
    const std::string bytes = enc.encode(e);
    auto back = dec.decode(bytes);
    ASSERT_TRUE(back.ok()) << event_name(e) << ": " << back.error().to_string();
    EXPECT_EQ(back->index(), e.index());
    EXPECT_EQ(again.encode(*back), bytes) << event_name(e);
  }
}

TEST(RecordCodec, ARequestsHashesAreWrittenOnce) {
  recorded_request r = req("a");
  std::vector<record_event> events{match_event{r, 0, 0}};
  r.block_hashes.push_back(block_key::from_index(3));
  events.push_back(match_event{r, 0, 0});
  events.push_back(finished_event{"a", false});
  events.push_back(match_event{r, 0, 0});  // after request_finished: the whole list again
  event_encoder enc;
  const std::string first = enc.encode(events[0]);
  const std::string appended = enc.encode(events[1]);
  EXPECT_LT(appended.size(), first.size());
  auto back = read_record(encode_record({{record_schema_version, 0, small_config()}, events}));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(std::get<match_event>(back->events[1]).req.block_hashes, r.block_hashes);
  EXPECT_EQ(std::get<match_event>(back->events[3]).req.block_hashes, r.block_hashes);

  // The appended hashes alone, without the event that wrote the first ones: refused.
  event_decoder fresh;
  auto alone = fresh.decode(appended);
  ASSERT_FALSE(alone.ok());
  EXPECT_NE(alone.error().message().find("do not continue"), std::string::npos)
      << alone.error().message();
}

TEST(RecordCodec, WholeRecordReadsBack) {
  run_record rec{{record_schema_version, 0, small_config()}, every_kind()};
  const std::string file = encode_record(rec);
  auto back = read_record(file);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->header.config, small_config());
  EXPECT_EQ(back->header.config_digest, config_digest(encode_config(small_config())));
  ASSERT_EQ(back->events.size(), rec.events.size());
  EXPECT_EQ(std::get<request_output_event>(back->events[6]).role,
            scheduler::request_output_role::releases_requests);
  EXPECT_EQ(std::get<request_output_event>(back->events[6]).invalid_block_ids,
            (std::vector<gpu_block>{9}));
  const auto& report = std::get<report_event>(back->events[9]).report;
  ASSERT_EQ(report.events.size(), 2u);
  EXPECT_EQ(report.events[0].seconds, 0.25);
  EXPECT_EQ(report.events[0].bytes, 4096u);
  EXPECT_EQ(report.events[1].detail, "cudaEventQuery returned cudaErrorIllegalAddress (700)");
}

// Offsets in a record of small_config(): magic (8), length (4), then the header array
// [schema, digest (0xcf + 8 bytes), bin8 (0xc4, n) config array ...], then its checksum.
constexpr size_t schema_at = 8 + 4 + 1;
constexpr size_t config_first_value_at = schema_at + 1 + 9 + 2 + 1;

/// Writes a fresh checksum for the frame at `at` (after its bytes were changed on purpose).
void reseal(std::string& file, size_t at) {
  const uint32_t len = static_cast<uint8_t>(file[at]) | static_cast<uint8_t>(file[at + 1]) << 8 |
                       static_cast<uint8_t>(file[at + 2]) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(file[at + 3])) << 24;
  const auto sum = le32(seal_record_frame(file.data() + at, len));
  file.replace(at + 4 + len, checksum_bytes, sum.data(), sum.size());
}

/// The bytes of a record in the layout of schema 2: frames without checksums.
std::string record_of_schema_2(bool with_event) {
  std::string header = encode_header(small_config());
  EXPECT_EQ(header[1], char{record_schema_version});  // [schema (a fixint), ...]
  header[1] = 2;
  std::string file{record_magic};
  auto frame = [&](const std::string& payload) {
    const auto len = le32(static_cast<uint32_t>(payload.size()));
    file.append(len.data(), len.size());
    file += payload;
  };
  frame(header);
  if (with_event) frame(event_encoder{}.encode(tick_event{5}));
  return file;
}

TEST(RecordReader, EveryCorruptedByteIsRefusedNamingItsFrame) {
  const std::string good =
      encode_record({{record_schema_version, 0, small_config()}, every_kind()});
  ASSERT_TRUE(read_record(good).ok());
  size_t checksum_errors = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (const unsigned flip : {0x01u, 0x80u, 0xffu}) {
      std::string bad = good;
      bad[i] = static_cast<char>(static_cast<uint8_t>(bad[i]) ^ flip);
      auto r = read_record(bad);
      ASSERT_FALSE(r.ok()) << "byte " << i << " xor " << flip << " read as a record";
      const std::string& m = r.error().message();
      if (i < record_magic.size()) {
        EXPECT_NE(m.find("bad magic"), std::string::npos) << m;
      } else {
        EXPECT_EQ(m.rfind("frame ", 0), 0u) << "byte " << i << ": " << m;
        EXPECT_NE(m.find("(byte "), std::string::npos) << m;
      }
      checksum_errors += m.find("fails its checksum") != std::string::npos ? 1 : 0;
    }
  }
  // Most flips land in a payload or a checksum; the checksum names them.
  EXPECT_GT(checksum_errors, good.size());
}

TEST(RecordReader, ARecordOfAnOlderSchemaNamesItsVersion) {
  for (const bool with_event : {false, true}) {
    auto r = read_record(record_of_schema_2(with_event));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), errc::protocol_mismatch);
    const std::string want = "schema version 2 is not the version this kvconnect reads (" +
                             std::to_string(record_schema_version) + ")";
    EXPECT_NE(r.error().message().find(want), std::string::npos) << r.error().message();
  }
}

TEST(RecordReader, AnotherSchemaVersionIsRefused) {
  std::string file = encode_record({{}, {}});
  ASSERT_EQ(file[schema_at], char{record_schema_version});
  file[schema_at] = char{record_schema_version + 1};
  auto r = read_record(file);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), errc::protocol_mismatch);
  const std::string want = "schema version " + std::to_string(record_schema_version + 1) +
                          " is not the version this kvconnect reads (" +
                          std::to_string(record_schema_version) + ")";
  EXPECT_NE(r.error().message().find(want), std::string::npos)
      << r.error().message();
}

TEST(RecordReader, AConfigThatDoesNotMatchItsDigestIsRefused) {
  std::string file = encode_record({{record_schema_version, 0, small_config()}, {}});
  ASSERT_EQ(file[config_first_value_at], char{16});  // gpu_block_size
  file[config_first_value_at] = char{32};
  auto corrupt = read_record(file);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.error().message().find("fails its checksum"), std::string::npos)
      << corrupt.error().message();
  reseal(file, record_magic.size());  // changed behind the digest's back, checksum and all
  auto r = read_record(file);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), errc::protocol_mismatch);
  EXPECT_NE(r.error().message().find("config digest"), std::string::npos) << r.error().message();
}

TEST(RecordReader, BadBytesGetOneClearError) {
  auto not_record = read_record(std::string{"hello world, not a record"});
  ASSERT_FALSE(not_record.ok());
  EXPECT_NE(not_record.error().message().find("bad magic"), std::string::npos);

  // A length prefix over the limit: refused from the prefix alone.
  std::string huge = encode_record({{}, {}}) + std::string{"\xff\xff\xff\x7f", 4};
  auto r = read_record(huge);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("over the limit"), std::string::npos) << r.error().message();

  // A frame running past the end of the input.
  const std::string whole = encode_record({{}, every_kind()});
  std::string cut = whole.substr(0, whole.size() - checksum_bytes - 3);
  auto c = read_record(cut);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("past the end"), std::string::npos) << c.error().message();

  // A frame whose checksum is cut short.
  auto no_sum = read_record(whole.substr(0, whole.size() - 1));
  ASSERT_FALSE(no_sum.ok());
  EXPECT_NE(no_sum.error().message().find("checksum is cut short"), std::string::npos)
      << no_sum.error().message();

  // A msgpack array claiming more elements than the frame holds (checksum and all).
  std::string array_of_4g{"\x05\x00\x00\x00\xdd\xff\xff\xff\xff", 9};
  const auto sum = le32(frame_checksum(array_of_4g));
  array_of_4g.append(sum.data(), sum.size());
  std::string lying = encode_record({{}, {}}) + array_of_4g;
  auto l = read_record(lying);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), errc::invalid_argument);
  EXPECT_EQ(l.error().message().find("checksum"), std::string::npos) << l.error().message();
}

// The recorder's frames carry the same checksums as encode_record's, and its file holds request
// ids and block hashes: mode 0600 (the umask set to the common 022 for the test).
TEST(Recorder, WritesAPrivateFileThatReadsBack) {
  const mode_t old_umask = ::umask(022);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kvc-recorder-" + std::to_string(::getpid()) + ".kvcrec"))
                               .string();
  {
    auto r = recorder::open(path, small_config());
    ASSERT_TRUE(r.ok()) << r.error().to_string();
    (*r)->rank_up(0, 1);
    (*r)->tick(42);
    (*r)->expect(3, 43);
    ASSERT_TRUE((*r)->close()) << (*r)->health().to_string();
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto back = read_record_file(path);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->header.config, small_config());
  ASSERT_EQ(back->events.size(), 3u);
  EXPECT_EQ(std::get<tick_event>(back->events[1]).now, 42u);
  const std::string bytes = encode_record(*back);
  std::ifstream in{path, std::ios::binary};
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>{in}, {}), bytes);
  std::filesystem::remove(path);
  ::umask(old_umask);
}

TEST(Replayer, IdenticalDigestsPassAndAChangedOneNamesStepAndField) {
  // One empty step planned and expected, and a poll that releases nothing yet.
  connector_metadata meta;
  meta.step = 1;
  build_event b;
  b.step = 1;
  b.ok = true;
  b.digest = digest_of(meta);
  run_record rec{{record_schema_version, 0, small_config()},
                 {rank_up_event{0, 0}, rank_up_event{1, 0}, b, expect_event{1, 1000},
                  poll_event{false, {}}}};
  std::vector<std::string> lines;
  auto ok = replay(rec, [&](std::string_view l) { lines.emplace_back(l); });
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_FALSE(ok->first.has_value()) << describe(*ok->first);
  EXPECT_EQ(ok->steps, 1u);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rfind("step 1 digest ", 0), 0u) << lines[0];

  meta.finished_requests = {"gone"};
  std::get<build_event>(rec.events[2]).digest = digest_of(meta);
  auto bad = replay(rec, {});
  ASSERT_TRUE(bad.ok());
  ASSERT_TRUE(bad->first.has_value());
  EXPECT_EQ(bad->first->step, 1u);
  EXPECT_EQ(bad->first->field, "metadata.finished_requests");
  EXPECT_EQ(bad->first->event, 2u);
}

TEST(Replayer, AConfigThatBuildsNoPlannerIsAnError) {
  recorded_config c = small_config();
  c.planner.manager.capacity = 0;
  auto r = replay({{record_schema_version, 0, c}, {}}, {});
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace kvc::record
