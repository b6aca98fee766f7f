#include "actors/scheduler/worker_registry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvc::scheduler {
namespace {

using scheduler::handshake_expectation;
using scheduler::make_registration;
using ::testing::HasSubstr;

handshake_expectation expectation() {
  return {.topology = {2, 1, 0},
          .segment = "/kvc-seg",
          .layout_checksum = 99,
          .token = "t"};
}

worker_registration reg(rank_id rank, uint32_t incarnation = 0) {
  return make_registration(expectation(), rank, incarnation, 100 + rank);
}

worker_registry make() {
  auto r = worker_registry::create(expectation());
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return std::move(r).value();
}

TEST(WorkerRegistryTest, CreateRejectsAnInvalidExpectation) {
  handshake_expectation e = expectation();
  e.token.clear();
  EXPECT_EQ(worker_registry::create(e).code(), errc::invalid_argument);
}

TEST(WorkerRegistryTest, AdmitsEveryRankOnceAndCompletesTheWorld) {
  worker_registry r = make();
  EXPECT_EQ(r.world_size(), 2u);
  EXPECT_FALSE(r.complete());
  ASSERT_TRUE(r.admit(reg(1, 5)).ok());
  EXPECT_TRUE(r.is_live(1));
  EXPECT_FALSE(r.is_live(0));
  EXPECT_EQ(r.incarnation(1), 5u);
  EXPECT_EQ(r.incarnation(0), std::nullopt);
  EXPECT_FALSE(r.complete());
  ASSERT_TRUE(r.admit(reg(0)).ok());
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.live_count(), 2u);
}

TEST(WorkerRegistryTest, RefusesADuplicateLiveRankAndChangesNothing) {
  worker_registry r = make();
  ASSERT_TRUE(r.admit(reg(0, 3)).ok());
  for (uint32_t inc : {0u, 3u, 4u}) {
    status s = r.admit(reg(0, inc));
    EXPECT_EQ(s.code(), errc::protocol_mismatch);
    EXPECT_THAT(s.message(), HasSubstr("already registered and alive (incarnation 3)"));
  }
  EXPECT_EQ(r.incarnation(0), 3u);
  EXPECT_EQ(r.live_count(), 1u);
}

TEST(WorkerRegistryTest, ALostRankReturnsOnlyWithAHigherIncarnation) {
  worker_registry r = make();
  ASSERT_TRUE(r.admit(reg(1, 2)).ok());
  ASSERT_TRUE(r.remove(1).ok());
  EXPECT_FALSE(r.is_live(1));
  EXPECT_EQ(r.live_count(), 0u);
  for (uint32_t inc : {0u, 2u}) {
    status s = r.admit(reg(1, inc));
    EXPECT_EQ(s.code(), errc::protocol_mismatch);
    EXPECT_THAT(s.message(), HasSubstr("incarnation above its last one, 2"));
  }
  EXPECT_FALSE(r.is_live(1));
  ASSERT_TRUE(r.admit(reg(1, 3)).ok());
  EXPECT_EQ(r.incarnation(1), 3u);
}

TEST(WorkerRegistryTest, AFirstRegistrationCannotTakeTheLargestIncarnation) {
  worker_registry r = make();
  status s = r.admit(reg(0, UINT32_MAX));
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_THAT(s.message(), HasSubstr("reserved"));
  EXPECT_FALSE(r.is_live(0));
  ASSERT_TRUE(r.admit(reg(0, 5)).ok());  // the refusal used up nothing
  ASSERT_TRUE(r.remove(0).ok());
  EXPECT_TRUE(r.admit(reg(0, UINT32_MAX)).ok());  // a restart may go up to it
}

TEST(WorkerRegistryTest, RemovingARankThatIsNotLiveIsNotFound) {
  worker_registry r = make();
  EXPECT_EQ(r.remove(0).code(), errc::not_found);
  EXPECT_EQ(r.remove(7).code(), errc::not_found);
  ASSERT_TRUE(r.admit(reg(0)).ok());
  ASSERT_TRUE(r.remove(0).ok());
  EXPECT_EQ(r.remove(0).code(), errc::not_found);
}

TEST(WorkerRegistryTest, RefusesABadHandshakeWithoutChangingAnything) {
  worker_registry r = make();
  worker_registration bad = reg(0);
  bad.token = "x";
  EXPECT_EQ(r.admit(bad).code(), errc::protocol_mismatch);
  bad = reg(0);
  bad.layout_checksum = 98;
  EXPECT_EQ(r.admit(bad).code(), errc::layout_mismatch);
  EXPECT_EQ(r.live_count(), 0u);
  EXPECT_EQ(r.incarnation(0), std::nullopt);
  // The refused attempts did not consume incarnation 0.
  EXPECT_TRUE(r.admit(reg(0, 0)).ok());
}

TEST(WorkerRegistryTest, AStopTellsTheLiveRanksOnceAndRefusesNewRegistrations) {
  worker_registry r = make();
  ASSERT_TRUE(r.admit(reg(0)).ok());
  ASSERT_TRUE(r.admit(reg(1)).ok());
  EXPECT_FALSE(r.stopping());
  EXPECT_FALSE(r.stop_complete());
  EXPECT_EQ(r.begin_stop(), (std::vector<rank_id>{0, 1}));
  EXPECT_TRUE(r.stopping());
  EXPECT_EQ(r.stopped(), 2u);
  EXPECT_TRUE(r.begin_stop().empty());  // told once
  ASSERT_TRUE(r.remove(1).ok());
  status s = r.admit(reg(1, 1));
  EXPECT_EQ(s.code(), errc::not_ready);
  EXPECT_THAT(s.message(), HasSubstr("stopping"));
  EXPECT_FALSE(r.is_live(1));
  EXPECT_FALSE(r.stop_complete());
  ASSERT_TRUE(r.remove(0).ok());
  EXPECT_TRUE(r.stop_complete());
}

TEST(WorkerRegistryTest, AStopWithNoLiveRankIsCompleteAtOnce) {
  worker_registry r = make();
  EXPECT_TRUE(r.begin_stop().empty());
  EXPECT_TRUE(r.stop_complete());
  EXPECT_EQ(r.stopped(), 0u);
}

}  // namespace
}  // namespace kvc::scheduler
