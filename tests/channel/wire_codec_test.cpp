// The step channel's wire codec: every message round trips with its tag (the proto/ structs
// bit-exactly, doubles included), and bad frames are one clear error.
#include "actors/channel/wire_codec.hpp"

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>

namespace kvc::channel {
namespace {

using ::testing::HasSubstr;

/// A struct through CAF's binary serialiser and back, as the codec does.
template <class T>
T round_trip(const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  T copy = x;
  EXPECT_FALSE(sink(copy));
  caf::binary_deserializer source{nullptr, buf};
  T y{};
  EXPECT_FALSE(source(y));
  EXPECT_EQ(source.remaining(), 0u);
  return y;
}

transfer_job sample_job(job_id id, transfer_kind kind) {
  return {.id = id,
          .request_id = "req-" + std::to_string(id) + "-\xc3\xa9",  // any bytes survive
          .kind = kind,
          .slots = {7, 8, 4'000'000'000u},
          .gpu_blocks = {1, 2, 3, 4, 5},
          .skip = 1,
          .group_sizes = {16, 32},
          .block_indices = {0, 7}};
}

connector_metadata sample_metadata_full() {
  return {.step = 42,
          .loads = {sample_job(1, transfer_kind::load)},
          .stores = {sample_job(2, transfer_kind::store), sample_job(3, transfer_kind::store)},
          .flush = {1, std::numeric_limits<job_id>::max()},
          .failed = {std::numeric_limits<job_id>::max()},
          .flush_requests = {"preempted-a", ""},
          .finished_requests = {"done-b"}};
}

completion_event sample_event() {
  return {.rank = 3,
          .incarnation = 2,
          .seq = 99,
          .step = 41,
          .job = 1ull << 40,
          .kind = transfer_kind::store,
          .ok = false,
          .error = errc::injected_fault,
          .bytes = 123'456'789'012ull,
          .seconds = 0.1 + 0.2,  // not exactly representable: must survive bit-exactly
          .detail = "cudaEventQuery returned cudaErrorIllegalAddress (700)"};
}

job_result sample_result() {
  return {.job = 5,
          .kind = transfer_kind::load,
          .ok = true,
          .error = errc::ok,
          .bytes = 4096,
          .seconds = 1e-9};
}

connector_metadata sample_metadata() {
  connector_metadata m;
  m.step = 42;
  m.loads.push_back({7, "req-a", transfer_kind::load, {1, 2, 3}, {10, 11, 12}, 1, {16}, {0}});
  m.stores.push_back({8, "req-b", transfer_kind::store, {4}, {13}, 0, {}, {}});
  m.flush = {5, 6};
  m.failed = {6};
  return m;
}

step_report sample_report() {
  step_report r{3, 2, 42, {}};
  r.events.push_back({.rank = 3,
                      .incarnation = 2,
                      .seq = 0,
                      .step = 42,
                      .job = 7,
                      .kind = transfer_kind::load,
                      .ok = true,
                      .error = errc::ok,
                      .bytes = 4096,
                      .seconds = 0.25});
  r.events.push_back({.rank = 3,
                      .incarnation = 2,
                      .seq = 1,
                      .step = 42,
                      .job = 8,
                      .kind = transfer_kind::store,
                      .ok = false,
                      .error = errc::io_error,
                      .bytes = 0,
                      .seconds = std::numeric_limits<double>::infinity(),
                      .detail = "cudaMemcpyAsync returned cudaErrorInvalidValue (1)"});
  return r;
}

TEST(WireCodecTest, ProtoStructsRoundTripThroughTheCodec) {
  EXPECT_EQ(round_trip(sample_job(9, transfer_kind::store)), sample_job(9, transfer_kind::store));
  EXPECT_EQ(round_trip(sample_metadata_full()), sample_metadata_full());
  EXPECT_EQ(round_trip(connector_metadata{}), connector_metadata{});
  completion_event ev = round_trip(sample_event());
  EXPECT_EQ(ev, sample_event());
  EXPECT_EQ(ev.seconds, 0.1 + 0.2);  // bit-exact double
  EXPECT_EQ(ev.kind, transfer_kind::store);
  EXPECT_EQ(ev.error, errc::injected_fault);
  EXPECT_EQ(round_trip(sample_result()), sample_result());
  connector_output out{.step = 7, .jobs = {sample_result(), sample_result()}};
  EXPECT_EQ(round_trip(out), out);
}

// CAF 0.17's own double packing loops forever on infinity and loses -0.0, NaN and subnormals:
// proto/ sends doubles as bit patterns (kvc::exact_double). Printing still shows the value.
TEST(WireCodecTest, SpecialDoublesRoundTripBitExactly) {
  job_result r = sample_result();
  for (double d : {0.0, -0.0, std::numeric_limits<double>::denorm_min(),
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::infinity()}) {
    r.seconds = d;
    job_result back = round_trip(r);
    EXPECT_EQ(back.seconds, d);
    EXPECT_EQ(std::signbit(back.seconds), std::signbit(d));
  }
  r.seconds = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(round_trip(r).seconds));
  r.seconds = 0.25;
  std::string text = caf::deep_to_string(r);
  EXPECT_NE(text.find("0.25"), std::string::npos) << text;
}

TEST(WireCodecTest, EveryMessageRoundTripsWithItsTag) {
  const auto meta = encode(sample_metadata());
  EXPECT_EQ(*kind_of(meta), wire_kind::metadata);
  EXPECT_EQ(*decode_metadata(meta), sample_metadata());
  const auto rep = encode(sample_report());
  EXPECT_EQ(*kind_of(rep), wire_kind::report);
  EXPECT_EQ(*decode_report(rep), sample_report());
  const auto hello = encode(wire_hello{5, 9, "secret"});
  EXPECT_EQ(*kind_of(hello), wire_kind::hello);
  EXPECT_EQ(*decode_hello(hello), (wire_hello{5, 9, "secret"}));
}

TEST(WireCodecTest, BadFramesAreOneClearError) {
  EXPECT_EQ(kind_of({}).code(), errc::protocol_mismatch);
  const wire_bytes unknown{char{9}, char{0}};
  EXPECT_THAT(kind_of(unknown).error().message(), HasSubstr("unknown frame tag 9"));
  const auto meta = encode(sample_metadata());
  EXPECT_THAT(decode_report(meta).error().message(), HasSubstr("expected a report frame"));
  // A sealed frame whose payload is cut short or has more after it (a peer that computes the
  // checksum over garbage).
  wire_bytes truncated = meta;
  truncated.resize((truncated.size() - checksum_bytes) / 2);
  seal_frame(truncated);
  EXPECT_THAT(decode_metadata(truncated).error().message(), HasSubstr("malformed metadata"));
  wire_bytes trailing = encode(wire_hello{1, 1, "t"});
  trailing.resize(trailing.size() - checksum_bytes);
  trailing.push_back('x');
  seal_frame(trailing);
  EXPECT_THAT(decode_hello(trailing).error().message(), HasSubstr("1 trailing bytes"));
  const wire_bytes too_short{static_cast<char>(wire_kind::hello), char{0}};
  EXPECT_THAT(decode_hello(too_short).error().message(), HasSubstr("no checksum"));
}

TEST(WireCodecTest, EverySingleBitFlipIsRefusedByTheChecksum) {
  const wire_bytes good = encode(sample_report());
  for (size_t bit = 8; bit < good.size() * 8; ++bit) {  // the tag's flips are other errors
    wire_bytes bad = good;
    bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
    auto r = decode_report(bad);
    ASSERT_FALSE(r.ok()) << "bit " << bit;
    EXPECT_THAT(r.error().message(), HasSubstr("checksum")) << "bit " << bit;
  }
  // The standard CRC-32 check value.
  const std::string check = "123456789";
  EXPECT_EQ(frame_checksum(check), 0xCBF43926u);
}

// Found by fuzzing (tests/fuzz/corpus/wire_codec/report_nan_seconds): a report whose event
// says NaN seconds decoded, and NaN poisons the coordinator's max over the ranks.
TEST(WireCodecTest, ValuesNoPeerSendsAreRefused) {
  for (double d : {std::numeric_limits<double>::quiet_NaN(), -1.0,
                   -std::numeric_limits<double>::infinity()}) {
    step_report r = sample_report();
    r.events[0].seconds = d;
    EXPECT_THAT(decode_report(encode(r)).error().message(), HasSubstr("seconds")) << d;
  }
  step_report kind = sample_report();
  kind.events[0].kind = static_cast<transfer_kind>(7);
  EXPECT_THAT(decode_report(encode(kind)).error().message(), HasSubstr("unknown kind"));
  step_report code = sample_report();
  code.events[0].error = static_cast<errc>(200);
  EXPECT_THAT(decode_report(encode(code)).error().message(), HasSubstr("unknown error code"));
  connector_metadata meta = sample_metadata();
  meta.stores.push_back(sample_job(99, static_cast<transfer_kind>(2)));
  EXPECT_THAT(decode_metadata(encode(meta)).error().message(), HasSubstr("unknown kind"));
  connector_metadata unflushed = sample_metadata();
  unflushed.failed = {6, 7};  // a failed job is flushed too
  EXPECT_THAT(decode_metadata(encode(unflushed)).error().message(),
              HasSubstr("names job 7 failed but not flushed"));
  EXPECT_TRUE(decode_report(encode(sample_report())).ok());
}

// A failure's detail is bounded (a peer cannot make the coordinator keep long texts) and only a
// failure has one.
TEST(WireCodecTest, AFailureDetailIsBoundedAndOnlyOnFailures) {
  step_report longest = sample_report();
  longest.events[1].detail = std::string(max_detail_bytes, 'x');
  auto back = decode_report(encode(longest));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back->events[1].detail, longest.events[1].detail);

  step_report too_long = longest;
  too_long.events[1].detail.push_back('x');
  EXPECT_THAT(decode_report(encode(too_long)).error().message(),
              HasSubstr("detail has 257 bytes (at most 256)"));

  step_report ok_with_detail = sample_report();
  ok_with_detail.events[0].detail = "fine";
  EXPECT_THAT(decode_report(encode(ok_with_detail)).error().message(),
              HasSubstr("a successful completion event with a failure detail"));
}

TEST(WireCodecTest, AFrameAboveTheLimitIsRefusedBeforeDecoding) {
  wire_bytes huge(max_frame_bytes + 1, '\0');
  huge[0] = static_cast<char>(wire_kind::report);
  EXPECT_THAT(decode_report(huge).error().message(), HasSubstr("above the limit"));
}

TEST(WireCodecTest, SummarizeReadsOnlyTheLeadingFields) {
  const auto meta = summarize(encode(sample_metadata()));
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, wire_kind::metadata);
  EXPECT_EQ(meta->step, sample_metadata().step);
  const step_report r = sample_report();
  const auto rep = summarize(encode(r));
  ASSERT_TRUE(rep);
  EXPECT_EQ(rep->kind, wire_kind::report);
  EXPECT_EQ(rep->rank, r.rank);
  EXPECT_EQ(rep->incarnation, r.incarnation);
  EXPECT_EQ(rep->step, r.step);
  const auto hello = summarize(encode(wire_hello{5, 9, "secret"}));
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->rank, 5u);
  EXPECT_EQ(hello->incarnation, 9u);
  // The rest of a frame is not read: a metadata frame cut after its step still summarizes.
  wire_bytes cut = encode(sample_metadata());
  cut.resize(1 + sizeof(step_id));
  EXPECT_TRUE(summarize(cut));
  cut.resize(3);
  EXPECT_EQ(summarize(cut).error().code(), errc::protocol_mismatch);
  EXPECT_EQ(summarize({}).error().code(), errc::protocol_mismatch);
}

}  // namespace
}  // namespace kvc::channel
