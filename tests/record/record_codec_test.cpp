// Run records (actors/record/): every event kind survives encode + decode, the reader refuses
// bad bytes with one clear error before allocating (magic, over-long or truncated frames,
// another schema, a config that does not match its digest), and the replayer re-drives fresh
// cores: identical digests pass, a changed one is reported with its step and field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_reader.hpp"
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
  b.digest.fields = {1, 2, 3, 4, 5, 6};
  step_report r{1, 0, 3, {{1, 0, 7, 3, 9, transfer_kind::store, true, errc::ok, 4096, 0.25, ""},
                          {1, 0, 8, 3, 10, transfer_kind::load, false, errc::device_error, 0, 0.5,
                           "cudaEventQuery returned cudaErrorIllegalAddress (700)"}}};
  return {match_event{req("a"), 16, 32},
          match_event{req("b"), 0, std::nullopt},
          alloc_event{req("a"), {4, 5}, true, {1, 0}, 16, true},
          b,
          finished_event{"a", true},
          request_output_event{{"a"}, {"b", "c"}},
          take_completions_event{},
          expect_event{3, 123456789},
          report_event{r},
          rank_up_event{1, 2},
          rank_down_event{1},
          tick_event{987654321},
          poll_event{true, {{11, 12}}}};
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
  const auto& report = std::get<report_event>(back->events[8]).report;
  ASSERT_EQ(report.events.size(), 2u);
  EXPECT_EQ(report.events[0].seconds, 0.25);
  EXPECT_EQ(report.events[0].bytes, 4096u);
  EXPECT_EQ(report.events[1].detail, "cudaEventQuery returned cudaErrorIllegalAddress (700)");
}

// Offsets in a record of small_config(): magic (8), length (4), then the header array
// [schema, digest (0xcf + 8 bytes), bin8 (0xc4, n) config array ...].
constexpr size_t schema_at = 8 + 4 + 1;
constexpr size_t config_first_value_at = schema_at + 1 + 9 + 2 + 1;

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
  std::string cut = encode_record({{}, every_kind()});
  cut.resize(cut.size() - 3);
  auto c = read_record(cut);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("past the end"), std::string::npos) << c.error().message();

  // A msgpack array claiming more elements than the frame holds.
  const std::string array_of_4g{"\x05\x00\x00\x00\xdd\xff\xff\xff\xff", 9};
  std::string lying = encode_record({{}, {}}) + array_of_4g;
  auto l = read_record(lying);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.error().code(), errc::invalid_argument);
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
