// engine_data_plane: the coordinator on the engine thread with its ZeroMQ routing, driven by
// real inproc clients (the ranks). Waits are for a frame with a generous limit, never sleeps.
#include "actors/embed/engine_data_plane.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include <gtest/gtest.h>

namespace kvc::embed {
namespace {

using namespace std::chrono_literals;
using runtime::data_plane_client;
using runtime::step_report;
using runtime::wire_hello;

connector_metadata step_with_load(step_id step, job_id job) {
  connector_metadata m;
  m.step = step;
  m.loads.push_back({job, "req", transfer_kind::load, {1}, {1}, 0});
  return m;
}

completion_event ok_event(rank_id rank, uint32_t inc, uint64_t seq, step_id step, job_id job) {
  return {.rank = rank, .incarnation = inc, .seq = seq, .step = step, .job = job,
          .kind = transfer_kind::load, .ok = true, .error = errc::ok, .bytes = 100,
          .seconds = 0.0};
}

class EngineDataPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dp = engine_data_plane::create(2, 0ns, "", "secret");
    ASSERT_TRUE(dp.ok()) << dp.error().to_string();
    dp_ = std::move(dp).value();
  }

  std::unique_ptr<data_plane_client> connect(rank_id rank, uint32_t inc,
                                             std::string token = "secret") {
    auto c = data_plane_client::create(dp_->server().context(), dp_->server().inproc_endpoint(),
                                       wire_hello{rank, inc, std::move(token)});
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  /// Ranks 0 and 1 registered (incarnation 0) and connected; both hellos handled.
  std::pair<std::unique_ptr<data_plane_client>, std::unique_ptr<data_plane_client>>
  both_ranks_routed() {
    dp_->rank_up(0, 0);
    dp_->rank_up(1, 0);
    auto r0 = connect(0, 0);
    auto r1 = connect(1, 0);
    while (dp_->routed_ranks() < 2 && dp_->pump(10s) > 0) {
    }
    EXPECT_EQ(dp_->routed_ranks(), 2u);
    return {std::move(r0), std::move(r1)};
  }

  /// Handles one more frame (waiting for it).
  void pump_one() { ASSERT_GE(dp_->pump(10s), 1u); }

  /// The metadata a rank received, waiting for it.
  static std::optional<connector_metadata> metadata_at(data_plane_client& c) {
    auto f = c.receive(10s);
    if (!f.ok() || !f->has_value()) return std::nullopt;
    auto m = runtime::decode_metadata(**f);
    return m.ok() ? std::optional<connector_metadata>{*m} : std::nullopt;
  }

  static void report(data_plane_client& c, const step_report& r) {
    ASSERT_TRUE(c.send(runtime::encode(r)).ok());
  }

  std::unique_ptr<engine_data_plane> dp_;
};

TEST_F(EngineDataPlaneTest, StepsPlannedBeforeAHelloReachTheRankOnceItIsRouted) {
  dp_->rank_up(0, 0);
  dp_->rank_up(1, 0);
  dp_->send_step(step_with_load(1, 10), 0);  // nobody said hello yet: queued for both
  auto r1 = connect(1, 0);
  pump_one();  // rank 1's hello: routed, its backlog sent
  EXPECT_EQ(dp_->routed_ranks(), 1u);
  auto m = metadata_at(*r1);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m, step_with_load(1, 10));

  // A hello that comes before its rank_up waits for it.
  dp_->rank_down(0);
  auto r0 = connect(0, 1);
  pump_one();
  EXPECT_EQ(dp_->routed_ranks(), 1u);
  dp_->rank_up(0, 1);
  EXPECT_EQ(dp_->routed_ranks(), 2u);
  dp_->send_step(step_with_load(2, 11), 0);
  m = metadata_at(*r0);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 2u);  // step 1 was the previous incarnation's
}

TEST_F(EngineDataPlaneTest, AJobIsDoneWhenEveryRankReportedItAndTheStepClosed) {
  auto [r0, r1] = both_ranks_routed();
  dp_->send_step(step_with_load(1, 10), 0);
  report(*r0, {0, 0, 1, {ok_event(0, 0, 0, 1, 10)}});
  pump_one();
  EXPECT_FALSE(dp_->poll_output().has_value());  // rank 1 has not reported
  report(*r1, {1, 0, 1, {ok_event(1, 0, 0, 1, 10)}});
  pump_one();
  auto out = dp_->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 1u);
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_TRUE(out->jobs[0].ok);
  EXPECT_EQ(out->jobs[0].bytes, 200u);
}

TEST_F(EngineDataPlaneTest, OnlyTheRanksRoutedConnectionMayReportForIt) {
  auto [r0, r1] = both_ranks_routed();
  dp_->send_step(step_with_load(1, 10), 0);
  report(*r1, {0, 0, 1, {ok_event(0, 0, 0, 1, 10)}});  // rank 1's socket speaks for rank 0
  pump_one();
  EXPECT_EQ(dp_->dropped_frames(), 1u);
  report(*r1, {1, 0, 1, {ok_event(1, 0, 0, 1, 10)}});
  pump_one();
  EXPECT_FALSE(dp_->poll_output().has_value());  // rank 0 still owes its report
  ASSERT_TRUE(r1->send(runtime::wire_bytes{char{2}, char{0}}).ok());  // not a report at all
  pump_one();
  EXPECT_EQ(dp_->dropped_frames(), 2u);
}

TEST_F(EngineDataPlaneTest, ALostRankFailsItsJobsAndNoLongerHoldsTheStep) {
  auto [r0, r1] = both_ranks_routed();
  dp_->send_step(step_with_load(1, 10), 0);
  report(*r0, {0, 0, 1, {ok_event(0, 0, 0, 1, 10)}});
  pump_one();
  dp_->rank_down(1);
  EXPECT_EQ(dp_->routed_ranks(), 1u);
  auto out = dp_->poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ(out->jobs[0].error, errc::io_error);
  // A hello of an older incarnation than the live one is refused, and one without the token.
  dp_->rank_up(1, 3);
  auto stale = connect(1, 2);
  pump_one();
  EXPECT_EQ(dp_->routed_ranks(), 1u);
  EXPECT_EQ(dp_->dropped_frames(), 1u);
  auto intruder = connect(1, 3, "guess");
  pump_one();
  EXPECT_EQ(dp_->routed_ranks(), 1u);
  EXPECT_EQ(dp_->dropped_frames(), 2u);
}

TEST_F(EngineDataPlaneTest, JobsTimeOutAtTheirDeadline) {
  auto dp = engine_data_plane::create(1, 5ns, "", "secret");
  ASSERT_TRUE(dp.ok());
  (*dp)->rank_up(0, 0);
  (*dp)->send_step(step_with_load(1, 10), 100);
  ASSERT_TRUE((*dp)->needs_tick());
  (*dp)->tick(104);
  EXPECT_FALSE((*dp)->poll_output().has_value());
  (*dp)->tick(105);
  EXPECT_FALSE((*dp)->poll_output().has_value());  // decided, held until rank 0 closes step 1
  auto r0 = data_plane_client::create((*dp)->server().context(),
                                      (*dp)->server().inproc_endpoint(),
                                      wire_hello{0, 0, "secret"});
  ASSERT_TRUE(r0.ok());
  ASSERT_GE((*dp)->pump(10s), 1u);  // hello: the backlog (step 1) goes out
  ASSERT_TRUE(metadata_at(**r0).has_value());
  report(**r0, {0, 0, 1, {}});
  ASSERT_GE((*dp)->pump(10s), 1u);
  auto out = (*dp)->poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0].error, errc::timeout);
}

}  // namespace
}  // namespace kvc::embed
