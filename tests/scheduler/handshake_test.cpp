#include "actors/scheduler/handshake.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace kvc::scheduler {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

handshake_expectation expectation() {
  return {.topology = {2, 2, 0},
          .segment = "/kvc-1000-demo-node0",
          .layout_checksum = 0x1234abcd5678ef00ull,
          .token = "s3cret-token"};
}

/// A registration of (tp_rank 1, pp_rank 1) = rank 3 that matches expectation().
worker_registration good() {
  return make_registration(expectation(), 3, 0, 4242);
}

TEST(HandshakeTest, MakeRegistrationDerivesTheGlobalRankAndMatches) {
  worker_registration r = good();
  EXPECT_EQ(r.rank, 3u);
  EXPECT_EQ(r.protocol_version, protocol_version);
  EXPECT_EQ(r.pid, 4242);
  EXPECT_TRUE(validate_registration(expectation(), r).ok());
  for (uint32_t pp = 0; pp < 2; ++pp) {
    for (uint32_t tp = 0; tp < 2; ++tp) {
      auto r = make_registration(expectation(), pp * 2 + tp, 7, 1);
      EXPECT_EQ(r.tp_rank, tp);
      EXPECT_EQ(r.pp_rank, pp);
      EXPECT_TRUE(validate_registration(expectation(), r).ok());
    }
  }
}

TEST(HandshakeTest, RefusesAnotherProtocolVersion) {
  worker_registration r = good();
  r.protocol_version = protocol_version + 1;
  status s = validate_registration(expectation(), r);
  EXPECT_EQ(s.code(), errc::protocol_mismatch);
  EXPECT_THAT(s.message(),
              AllOf(HasSubstr("rank 3"), HasSubstr("pid 4242"),
                    HasSubstr("protocol version " + std::to_string(protocol_version + 1))));
}

TEST(HandshakeTest, RefusesAWrongTokenWithoutEchoingIt) {
  for (std::string token : {"s3cret-tokeN", "s3cret-token2", "s3cret", "", "guess"}) {
    worker_registration r = good();
    r.token = token;
    status s = validate_registration(expectation(), r);
    EXPECT_EQ(s.code(), errc::protocol_mismatch) << token;
    EXPECT_THAT(s.message(), HasSubstr("wrong token"));
    EXPECT_THAT(s.message(), Not(HasSubstr("s3cret")));
    if (!token.empty()) {
      EXPECT_THAT(s.message(), Not(HasSubstr(token)));
    }
  }
}

TEST(HandshakeTest, RefusesAnotherNodeOrTopology) {
  worker_registration r = good();
  r.node = 1;
  EXPECT_EQ(validate_registration(expectation(), r).code(), errc::protocol_mismatch);
  EXPECT_THAT(validate_registration(expectation(), r).message(), HasSubstr("node 1"));

  // A worker of a tp=4 x pp=1 deployment: same world size, another topology.
  handshake_expectation other = expectation();
  other.topology.tp_size = 4;
  other.topology.pp_size = 1;
  status s = validate_registration(expectation(), make_registration(other, 3, 0, 1));
  EXPECT_EQ(s.code(), errc::protocol_mismatch);
  EXPECT_THAT(s.message(), HasSubstr("tp=4 pp=1, the scheduler runs tp=2 pp=2"));
}

TEST(HandshakeTest, RefusesRanksOutOfRangeOrInconsistent) {
  auto refused = [](worker_registration r) {
    status s = validate_registration(expectation(), r);
    EXPECT_EQ(s.code(), errc::invalid_argument);
    EXPECT_THAT(s.message(), HasSubstr("rank out of range or inconsistent"));
  };
  worker_registration r = good();
  r.rank = 4;  // beyond the world
  refused(r);
  r = good();
  r.rank = 2;  // pp_rank 1 * tp_size 2 + tp_rank 1 is 3, not 2
  refused(r);
  r = good();
  r.tp_rank = 2;
  r.rank = 1 * 2 + 2;
  refused(r);
  r = good();
  r.pp_rank = 2;
  r.tp_rank = 0;
  r.rank = 4;
  refused(r);
}

TEST(HandshakeTest, RefusesAnotherSegmentOrLayout) {
  worker_registration r = good();
  r.segment = "/kvc-1000-other-node0";
  status s = validate_registration(expectation(), r);
  EXPECT_EQ(s.code(), errc::layout_mismatch);
  EXPECT_THAT(s.message(),
              HasSubstr("/kvc-1000-other-node0, the scheduler's is /kvc-1000-demo-node0"));

  r = good();
  r.layout_checksum ^= 1;
  s = validate_registration(expectation(), r);
  EXPECT_EQ(s.code(), errc::layout_mismatch);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("layout checksum 0x1234abcd5678ef01"),
                                 HasSubstr("segment /kvc-1000-demo-node0's 0x1234abcd5678ef00")));
}

TEST(HandshakeTest, AMultiNodeSchedulerServesEveryNodesWorkersWithTheirOwnSegments) {
  handshake_expectation e = expectation();
  e.nodes = 2;
  // A worker of node 1 names node 1's segment; the layout is what must match.
  worker_registration r = good();
  r.node = 1;
  r.segment = "/kvc-1001-demo-node1";
  EXPECT_TRUE(validate_registration(e, r).ok());
  r.layout_checksum ^= 1;
  EXPECT_EQ(validate_registration(e, r).code(), errc::layout_mismatch);
  // Node 0's workers still name the scheduler's segment.
  r = good();
  r.segment = "/kvc-1000-demo-node1";
  EXPECT_EQ(validate_registration(e, r).code(), errc::layout_mismatch);
  // A node past the topology's is refused.
  r = good();
  r.node = 2;
  const status s = validate_registration(e, r);
  EXPECT_EQ(s.code(), errc::protocol_mismatch);
  EXPECT_THAT(s.message(), HasSubstr("node 2, the scheduler serves nodes 0..1"));
  // One node (the default): another node's worker is refused as before.
  r.node = 1;
  EXPECT_EQ(validate_registration(expectation(), r).code(), errc::protocol_mismatch);
  // A multi-node scheduler runs on node 0.
  e.topology.node = 1;
  EXPECT_EQ(validate_expectation(e).code(), errc::invalid_argument);
  e.topology.node = 0;
  e.nodes = 0;
  EXPECT_EQ(validate_expectation(e).code(), errc::invalid_argument);
}

TEST(HandshakeTest, ReportsTheFirstDifferenceInCheckOrder) {
  worker_registration r = good();
  r.layout_checksum = 0;
  r.token = "bad";
  r.protocol_version = 0;
  EXPECT_THAT(validate_registration(expectation(), r).message(), HasSubstr("protocol version 0"));
  r.protocol_version = protocol_version;
  EXPECT_THAT(validate_registration(expectation(), r).message(), HasSubstr("wrong token"));
  r.token = expectation().token;
  EXPECT_THAT(validate_registration(expectation(), r).message(), HasSubstr("layout checksum"));
}

TEST(HandshakeTest, ValidatesTheExpectation) {
  EXPECT_TRUE(validate_expectation(expectation()).ok());
  auto bad = [](auto mutate, const char* what) {
    handshake_expectation e = expectation();
    mutate(e);
    status s = validate_expectation(e);
    EXPECT_EQ(s.code(), errc::invalid_argument) << what;
    EXPECT_THAT(s.message(), HasSubstr(what));
  };
  bad([](auto& e) { e.topology.tp_size = 0; }, "tp_size and pp_size");
  bad([](auto& e) { e.topology.pp_size = 0; }, "tp_size and pp_size");
  bad(
      [](auto& e) {
        e.topology.tp_size = 16;
        e.topology.pp_size = 17;
      },
      "tp_size * pp_size <= 256");
  bad([](auto& e) { e.segment.clear(); }, "segment");
  bad([](auto& e) { e.token.clear(); }, "token");
  handshake_expectation biggest = expectation();
  biggest.topology.tp_size = 256;
  biggest.topology.pp_size = 1;
  EXPECT_TRUE(validate_expectation(biggest).ok());
}

}  // namespace
}  // namespace kvc::scheduler
