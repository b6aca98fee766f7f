// The coordinator actor, blocking on the calling thread: control messages (rank_up / rank_down)
// through its CAF mailbox, steps out and reports back over the step channel's memory transport,
// step outputs released by the aggregator's rules. Everything happens inside its calls, so the
// test drives it step by step: no threads of its own, no waits.
#include "actors/coordinator/blocking_coordinator.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/send.hpp>

#include "actors/channel/memory_transport.hpp"
#include "actors/channel/rank_channel.hpp"
#include "tests/control/deterministic_fixture.hpp"

namespace kvc::coordinator {
namespace {

using namespace std::chrono_literals;

connector_metadata step_with_load(step_id s, job_id job) {
  connector_metadata m;
  m.step = s;
  m.loads.push_back({.id = job,
                     .request_id = "r",
                     .kind = transfer_kind::load,
                     .slots = {1},
                     .gpu_blocks = {2},
                     .skip = 0,
                     .group_sizes = {},
                     .block_indices = {}});
  return m;
}

step_report report(rank_id rank, step_id s, std::vector<job_id> ok_jobs, uint64_t first_seq = 0) {
  step_report r{rank, 0, s, {}};
  for (job_id j : ok_jobs) {
    r.events.push_back({.rank = rank,
                        .incarnation = 0,
                        .seq = first_seq++,
                        .step = s,
                        .job = j,
                        .kind = transfer_kind::load,
                        .ok = true,
                        .bytes = 100});
  }
  return r;
}

class BlockingCoordinatorTest : public test_support::deterministic_actor_test {
 protected:
  void start(uint32_t world, std::chrono::nanoseconds job_timeout = 0ns) {
    auto ch =
        channel::scheduler_channel::create(std::make_unique<channel::memory_server>(), world, "t");
    ASSERT_TRUE(ch.ok());
    server_ = &(*ch)->transport();
    auto c = blocking_coordinator::create(sys(), {.world_size = world, .job_timeout = job_timeout},
                                          std::move(ch).value());
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    coord_ = std::move(c).value();
  }

  /// Registers rank r (rank_up from "the scheduler actor") and connects its channel.
  void join(rank_id r) {
    caf::anon_send(coord_->handle(), control::rank_up_atom::value, r, uint32_t{0});
    auto t = server_->connect_local(channel::peer_id(r, 0));
    ASSERT_TRUE(t.ok());
    auto rc = channel::rank_channel::open(std::move(t).value(), {r, 0, "t"});
    ASSERT_TRUE(rc.ok());
    ranks_.push_back(std::move(rc).value());
  }

  channel::rank_channel& rank(rank_id r) { return *ranks_[r]; }

  std::optional<connector_metadata> next(rank_id r) {
    auto m = rank(r).next_step(0ms);
    EXPECT_TRUE(m.ok());
    return m ? *m : std::nullopt;
  }

  channel::server_transport* server_ = nullptr;
  std::unique_ptr<blocking_coordinator> coord_;
  std::vector<std::unique_ptr<channel::rank_channel>> ranks_;
};

TEST_F(BlockingCoordinatorTest, ReleasesAStepOnlyOnceEveryRankReportedIt) {
  start(2);
  join(0);
  join(1);
  coord_->take_arrived();  // rank_up first, then the hellos
  EXPECT_EQ(coord_->routed_ranks(), 2u);
  coord_->send_step(step_with_load(1, 10));
  EXPECT_EQ(next(0), step_with_load(1, 10));
  EXPECT_EQ(next(1), step_with_load(1, 10));

  ASSERT_TRUE(rank(0).send_report(report(0, 1, {10})).ok());
  coord_->take_arrived();
  EXPECT_EQ(coord_->poll_output(), std::nullopt);  // rank 1 has not closed step 1
  ASSERT_TRUE(rank(1).send_report(report(1, 1, {10})).ok());
  coord_->take_arrived();
  auto out = coord_->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 1u);
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0],
            (job_result{.job = 10, .kind = transfer_kind::load, .ok = true, .bytes = 200}));
  EXPECT_EQ(coord_->poll_output(), std::nullopt);  // once
}

TEST_F(BlockingCoordinatorTest, ALostRankFailsItsJobsAndStopsBeingWaitedFor) {
  start(2);
  join(0);
  join(1);
  coord_->send_step(step_with_load(1, 10));  // takes the rank_ups and hellos first
  ASSERT_TRUE(rank(0).send_report(report(0, 1, {10})).ok());
  caf::anon_send(coord_->handle(), control::rank_down_atom::value, rank_id{1});
  coord_->take_arrived();
  auto out = coord_->poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ(coord_->routed_ranks(), 1u);
  // The next step goes to rank 0 only and is released on its report alone; its job fails: every
  // rank holds a shard of each block, so nothing completes while a rank is lost.
  coord_->send_step(step_with_load(2, 11));
  EXPECT_EQ(next(0)->step, 1u);
  EXPECT_EQ(next(0)->step, 2u);
  EXPECT_EQ(next(1)->step, 1u);
  EXPECT_EQ(next(1), std::nullopt);
  ASSERT_TRUE(rank(0).send_report(report(0, 2, {11}, 1)).ok());
  coord_->take_arrived();
  out = coord_->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 2u);
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0].job, 11u);
  EXPECT_FALSE(out->jobs[0].ok);
}

TEST_F(BlockingCoordinatorTest, AJobPastItsDeadlineFailsWithTimeout) {
  start(1, 1ns);  // any later look at the clock is past the deadline
  join(0);
  coord_->send_step(step_with_load(1, 10));
  coord_->take_arrived();
  ASSERT_TRUE(rank(0).send_report(report(0, 1, {})).ok());  // closes step 1, job 10 silent
  coord_->take_arrived();
  auto out = coord_->poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ(out->jobs[0].error, errc::timeout);
}

/// A decorator at the core that writes down every input and every poll's answer, in order, and
/// passes each call on.
class input_log final : public step_core {
 public:
  input_log(std::unique_ptr<step_core> target, std::vector<std::string>& lines)
      : target_(std::move(target)), lines_(lines) {}
  void report(const step_report& r) override {
    lines_.push_back("report r" + std::to_string(r.rank) + " s" + std::to_string(r.step));
    target_->report(r);
  }
  void expect(const connector_metadata& meta, uint64_t now) override {
    lines_.push_back("expect s" + std::to_string(meta.step));
    target_->expect(meta, now);
  }
  void rank_up(rank_id rank, uint32_t incarnation) override {
    lines_.push_back("up r" + std::to_string(rank) + "." + std::to_string(incarnation));
    target_->rank_up(rank, incarnation);
  }
  void rank_down(rank_id rank) override {
    lines_.push_back("down r" + std::to_string(rank));
    target_->rank_down(rank);
  }
  void tick(uint64_t now) override { target_->tick(now); }  // when is the clock's business
  void forget_jobs(std::span<const job_id> jobs) override {
    lines_.push_back("forget " + std::to_string(jobs.size()));
    target_->forget_jobs(jobs);
  }
  std::optional<connector_output> poll_output() override {
    auto out = target_->poll_output();
    lines_.push_back(out ? "poll s" + std::to_string(out->step) : "poll none");
    return out;
  }
  bool needs_tick() const noexcept override { return target_->needs_tick(); }
  std::vector<coordinator_note> take_notes() override { return target_->take_notes(); }
  const step_coordinator& state() const noexcept override { return target_->state(); }

 private:
  std::unique_ptr<step_core> target_;
  std::vector<std::string>& lines_;
};

TEST_F(BlockingCoordinatorTest, ADecoratorAtTheCoreSeesEveryInputInOrderAndChangesNothing) {
  start(2);
  std::vector<std::string> lines;
  coord_->wrap_core([&](std::unique_ptr<step_core> core) {
    return std::make_unique<input_log>(std::move(core), lines);
  });
  join(0);
  join(1);
  coord_->send_step(step_with_load(1, 10));  // the rank_ups first
  ASSERT_TRUE(rank(0).send_report(report(0, 1, {10})).ok());
  ASSERT_TRUE(rank(1).send_report(report(1, 1, {10})).ok());
  coord_->take_arrived();
  auto out = coord_->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->jobs[0],
            (job_result{.job = 10, .kind = transfer_kind::load, .ok = true, .bytes = 200}));
  caf::anon_send(coord_->handle(), control::rank_down_atom::value, rank_id{1});
  coord_->take_arrived();
  EXPECT_EQ(coord_->poll_output(), std::nullopt);
  EXPECT_EQ(lines, (std::vector<std::string>{"up r0.0", "up r1.0", "expect s1", "report r0 s1",
                                             "report r1 s1", "poll s1", "down r1",
                                             "poll none"}));
  EXPECT_EQ(coord_->core().stats().completed, 1u);  // the state read through the decorator
}

TEST_F(BlockingCoordinatorTest, TheEndOfTheWatchedSchedulerActorMakesItGone) {
  start(1);
  auto peer = spawn([] { return caf::behavior{[](int) {}}; });
  coord_->watch(peer);
  coord_->take_arrived();
  EXPECT_FALSE(coord_->gone());
  caf::anon_send_exit(peer, caf::exit_reason::kill);
  run();
  coord_->take_arrived();
  EXPECT_TRUE(coord_->gone());
}

TEST_F(BlockingCoordinatorTest, BadOptionsAreRefusedBeforeAnythingStarts) {
  auto ch = channel::scheduler_channel::create(std::make_unique<channel::memory_server>(), 1, "t");
  ASSERT_TRUE(ch.ok());
  EXPECT_EQ(blocking_coordinator::create(sys(), {.world_size = 0}, std::move(ch).value()).code(),
            errc::invalid_argument);
  EXPECT_EQ(blocking_coordinator::create(sys(), {.world_size = 1}, nullptr).code(),
            errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::coordinator
