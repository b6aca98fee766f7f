// The ZeroMQ data plane: wire_codec round trips and refusals, and server / client sockets over
// inproc and tcp. Waits are for a message with a generous limit, never sleeps.
#include "actors/runtime/data_plane.hpp"

#include <chrono>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "actors/runtime/wire_codec.hpp"

namespace kvc::runtime {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

connector_metadata sample_metadata() {
  connector_metadata m;
  m.step = 42;
  m.loads.push_back({7, "req-a", transfer_kind::load, {1, 2, 3}, {10, 11, 12}, 1});
  m.stores.push_back({8, "req-b", transfer_kind::store, {4}, {13}, 0});
  m.flush = {5, 6};
  return m;
}

step_report sample_report() {
  step_report r{3, 2, 42, {}};
  r.events.push_back({.rank = 3, .incarnation = 2, .seq = 0, .step = 42, .job = 7,
                      .kind = transfer_kind::load, .ok = true, .error = errc::ok, .bytes = 4096,
                      .seconds = 0.25});
  r.events.push_back({.rank = 3, .incarnation = 2, .seq = 1, .step = 42, .job = 8,
                      .kind = transfer_kind::store, .ok = false, .error = errc::io_error,
                      .bytes = 0, .seconds = std::numeric_limits<double>::infinity()});
  return r;
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
  wire_bytes truncated = meta;
  truncated.resize(truncated.size() / 2);
  EXPECT_THAT(decode_metadata(truncated).error().message(), HasSubstr("malformed metadata"));
  wire_bytes trailing = encode(wire_hello{1, 1});
  trailing.push_back('x');
  EXPECT_THAT(decode_hello(trailing).error().message(), HasSubstr("1 trailing bytes"));
}

/// The server's next frame, waiting up to 10 s for it.
inbound_frame next_frame(data_plane_server& s) {
  auto f = s.receive(10s);
  EXPECT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_TRUE(f.ok() && f->has_value()) << "no frame arrived";
  return f.ok() && f->has_value() ? **f : inbound_frame{};
}

void exchange_both_ways(data_plane_server& server, data_plane_client& client) {
  const inbound_frame hello = next_frame(server);
  EXPECT_EQ(hello.peer, "r3.2");
  EXPECT_EQ(*decode_hello(hello.bytes), (wire_hello{3, 2, "t"}));
  ASSERT_TRUE(server.send(hello.peer, encode(sample_metadata())).ok());
  auto got = client.receive(10s);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ(*decode_metadata(**got), sample_metadata());
  ASSERT_TRUE(client.send(encode(sample_report())).ok());
  const inbound_frame rep = next_frame(server);
  EXPECT_EQ(rep.peer, "r3.2");
  EXPECT_EQ(*decode_report(rep.bytes), sample_report());
}

TEST(DataPlaneTest, InprocClientSharesTheServersContext) {
  auto server = data_plane_server::create("");
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  EXPECT_EQ((*server)->tcp_endpoint(), "");
  EXPECT_THAT((*server)->inproc_endpoint(), HasSubstr("inproc://kvc-data-"));
  auto client = data_plane_client::create((*server)->context(), (*server)->inproc_endpoint(),
                                          {3, 2, "t"});
  ASSERT_TRUE(client.ok()) << client.error().to_string();
  exchange_both_ways(**server, **client);
}

TEST(DataPlaneTest, TcpClientWithItsOwnContext) {
  auto server = data_plane_server::create("127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.error().to_string();
  EXPECT_THAT((*server)->tcp_endpoint(), HasSubstr("tcp://127.0.0.1:"));
  auto client = data_plane_client::create(nullptr, (*server)->tcp_endpoint(), {3, 2, "t"});
  ASSERT_TRUE(client.ok()) << client.error().to_string();
  exchange_both_ways(**server, **client);
}

TEST(DataPlaneTest, NothingToReadIsNotAnErrorAndAnUnknownPeerIsOne) {
  auto server = data_plane_server::create("");
  ASSERT_TRUE(server.ok());
  auto none = (*server)->receive(0ms);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ((*server)->send("r9.0", encode(sample_metadata())).code(), errc::io_error);
  EXPECT_EQ(data_plane_server::create("no-such-host.invalid").code(), errc::io_error);
}

}  // namespace
}  // namespace kvc::runtime
