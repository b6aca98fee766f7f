#include "actors/coordinator/coordinator_actor.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/after.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/interfaces.hpp"
#include "actors/runtime/system_config.hpp"
#include "tests/runtime/deterministic_fixture.hpp"

namespace kvc::coordinator {
namespace {

using namespace std::chrono_literals;
using runtime::coordinator_actor;
using runtime::output_sink_actor;

using output_log = std::vector<connector_output>;

/// A fake scheduler: records every output it receives.
output_sink_actor::behavior_type recorder(output_sink_actor::pointer,
                                          std::shared_ptr<output_log> log) {
  return {[log](const connector_output& out) { log->push_back(out); }};
}

completion_event event(rank_id rank, job_id job, transfer_kind kind, bool ok = true,
                       errc error = errc::ok) {
  return {.rank = rank,
          .job = job,
          .kind = kind,
          .ok = ok,
          .error = error,
          .bytes = 1024,
          .seconds = 0.001};
}

class CoordinatorActorTest : public test_support::deterministic_actor_test {
 protected:
  void start(coordinator_options opts) {
    sink_ = spawn(recorder, log_);
    auto coord = spawn_coordinator(sys(), sink_, opts);
    ASSERT_TRUE(coord.ok()) << coord.error().to_string();
    coord_ = *coord;
    track(coord_);
  }

  void expect(step_id step, std::vector<job_id> loads, std::vector<job_id> stores) {
    caf::anon_send(coord_, runtime::expect_atom::value, step, std::move(loads), std::move(stores));
    run();
  }

  void report(rank_id rank, step_id step, std::vector<completion_event> events,
              uint32_t incarnation = 0) {
    for (auto& ev : events) ev.incarnation = incarnation;
    caf::anon_send(coord_, runtime::report_atom::value, rank, incarnation, step, std::move(events));
    run();
  }

  /// Every job result received so far, by job id, with how often it arrived.
  std::map<job_id, std::vector<job_result>> results_by_job() const {
    std::map<job_id, std::vector<job_result>> by_job;
    for (const auto& out : *log_) {
      for (const auto& r : out.jobs) by_job[r.job].push_back(r);
    }
    return by_job;
  }

  std::shared_ptr<output_log> log_ = std::make_shared<output_log>();
  output_sink_actor sink_;
  coordinator_actor coord_;
};

TEST_F(CoordinatorActorTest, AggregatesFourRanksIntoOneResultPerJob) {
  start({.world_size = 4});
  expect(0, {1}, {2});
  for (rank_id r = 0; r < 3; ++r) {
    report(r, 0, {event(r, 1, transfer_kind::load), event(r, 2, transfer_kind::store)});
  }
  EXPECT_TRUE(log_->empty());  // rank 3 has not closed step 0
  report(3, 0, {event(3, 1, transfer_kind::load)});
  ASSERT_EQ(log_->size(), 1u);
  EXPECT_EQ((*log_)[0].step, 0u);
  ASSERT_EQ((*log_)[0].jobs.size(), 1u);
  EXPECT_EQ((*log_)[0].jobs[0], (job_result{.job = 1,
                                            .kind = transfer_kind::load,
                                            .ok = true,
                                            .error = errc::ok,
                                            .bytes = 4096,
                                            .seconds = 0.001}));

  for (rank_id r = 0; r < 3; ++r) report(r, 1, {});
  report(3, 1, {event(3, 2, transfer_kind::store)});
  ASSERT_EQ(log_->size(), 2u);  // one output per step
  EXPECT_EQ((*log_)[1].step, 1u);
  auto by_job = results_by_job();
  ASSERT_EQ(by_job.size(), 2u);
  EXPECT_EQ(by_job[1].size(), 1u);
  EXPECT_EQ(by_job[2].size(), 1u);
  EXPECT_TRUE(by_job[2][0].ok);
}

TEST_F(CoordinatorActorTest, IgnoresDuplicateReports) {
  start({.world_size = 4});
  expect(0, {}, {5});
  auto ev0 = event(0, 5, transfer_kind::store);
  report(0, 0, {ev0, ev0});  // twice in one batch
  report(0, 1, {ev0});       // and again in the next step
  for (rank_id r = 1; r < 3; ++r) report(r, 0, {event(r, 5, transfer_kind::store)});
  report(3, 0, {});
  ASSERT_EQ(log_->size(), 1u);
  EXPECT_TRUE((*log_)[0].jobs.empty());  // three distinct ranks only: not done
  for (rank_id r = 1; r < 3; ++r) report(r, 1, {});
  report(3, 1, {event(3, 5, transfer_kind::store)});
  report(3, 2, {event(3, 5, transfer_kind::store)});  // late duplicate
  for (rank_id r = 0; r < 3; ++r) report(r, 2, {});
  auto by_job = results_by_job();
  ASSERT_EQ(by_job[5].size(), 1u);
  EXPECT_TRUE(by_job[5][0].ok);
  EXPECT_EQ(by_job[5][0].bytes, 4u * 1024);
  EXPECT_EQ(log_->size(), 3u);
}

TEST_F(CoordinatorActorTest, DropsReportsOfUnknownRanks) {
  start({.world_size = 4});
  expect(0, {7}, {});
  for (rank_id r = 0; r < 3; ++r) report(r, 0, {event(r, 7, transfer_kind::load)});
  report(4, 0, {event(4, 7, transfer_kind::load)});  // rank 4 does not exist
  report(9, 0, {event(9, 7, transfer_kind::load)});
  EXPECT_TRUE(log_->empty());  // neither completes the job nor closes the step
  report(3, 0, {event(3, 7, transfer_kind::load)});
  ASSERT_EQ(log_->size(), 1u);
  ASSERT_EQ((*log_)[0].jobs.size(), 1u);
  EXPECT_TRUE((*log_)[0].jobs[0].ok);
}

TEST_F(CoordinatorActorTest, PropagatesTheFirstFailureOnce) {
  start({.world_size = 4});
  expect(0, {3}, {});
  report(0, 0, {event(0, 3, transfer_kind::load)});
  report(2, 0, {event(2, 3, transfer_kind::load, false, errc::device_error)});
  report(1, 0, {event(1, 3, transfer_kind::load, false, errc::injected_fault)});
  report(3, 0, {event(3, 3, transfer_kind::load)});
  ASSERT_EQ(log_->size(), 1u);
  ASSERT_EQ((*log_)[0].jobs.size(), 1u);
  EXPECT_FALSE((*log_)[0].jobs[0].ok);
  EXPECT_EQ((*log_)[0].jobs[0].error, errc::device_error);
  for (rank_id r = 0; r < 4; ++r) report(r, 1, {});
  EXPECT_EQ(results_by_job()[3].size(), 1u);
}

TEST_F(CoordinatorActorTest, StaleIncarnationIsDroppedAfterARestart) {
  start({.world_size = 2});
  expect(0, {}, {1});
  caf::anon_send(coord_, runtime::rank_up_atom::value, rank_id{1}, uint32_t{1});
  run();
  report(1, 0, {event(1, 1, transfer_kind::store)}, /*incarnation=*/0);  // the old process
  report(0, 0, {event(0, 1, transfer_kind::store)});
  EXPECT_TRUE(log_->empty());  // rank 1's old incarnation cannot close the step
  report(1, 0, {}, /*incarnation=*/1);
  ASSERT_EQ(log_->size(), 1u);
  ASSERT_EQ((*log_)[0].jobs.size(), 1u);
  EXPECT_EQ((*log_)[0].jobs[0].error, errc::io_error);  // its old incarnation never reported
}

TEST_F(CoordinatorActorTest, RankDownFailsWaitingJobsAndReleasesTheBarrier) {
  start({.world_size = 2});
  expect(0, {4}, {});
  report(0, 0, {event(0, 4, transfer_kind::load)});
  EXPECT_TRUE(log_->empty());
  caf::anon_send(coord_, runtime::rank_down_atom::value, rank_id{1});
  run();
  ASSERT_EQ(log_->size(), 1u);  // rank 1 no longer holds step 0 back
  ASSERT_EQ((*log_)[0].jobs.size(), 1u);
  EXPECT_EQ((*log_)[0].jobs[0].error, errc::io_error);
}

TEST_F(CoordinatorActorTest, TimesOutJobsOnTheFakeClock) {
  start({.world_size = 2, .job_timeout = 1s, .tick_interval = 100ms});
  expect(0, {}, {8});
  report(0, 0, {event(0, 8, transfer_kind::store)});
  report(1, 0, {});
  ASSERT_EQ(log_->size(), 1u);
  EXPECT_TRUE((*log_)[0].jobs.empty());
  advance(900ms);  // the first tick fires (and re-arms 100 ms later): before the deadline
  report(0, 1, {});
  report(1, 1, {});
  ASSERT_EQ(log_->size(), 2u);
  EXPECT_TRUE((*log_)[1].jobs.empty());
  advance(100ms);  // the deadline
  report(0, 2, {});
  report(1, 2, {});
  ASSERT_EQ(log_->size(), 3u);
  ASSERT_EQ((*log_)[2].jobs.size(), 1u);
  EXPECT_EQ((*log_)[2].jobs[0].error, errc::timeout);
  report(1, 3, {event(1, 8, transfer_kind::store)});  // the straggler is absorbed
  report(0, 3, {});
  EXPECT_EQ(results_by_job()[8].size(), 1u);
}

TEST_F(CoordinatorActorTest, RejectsInvalidOptions) {
  sink_ = spawn(recorder, log_);
  EXPECT_EQ(spawn_coordinator(sys(), sink_, {.world_size = 0}).code(), errc::invalid_argument);
  EXPECT_EQ(spawn_coordinator(sys(), sink_, {.world_size = 2, .tick_interval = 0s}).code(),
            errc::invalid_argument);
  EXPECT_EQ(spawn_coordinator(sys(), output_sink_actor{}, {.world_size = 2}).code(),
            errc::invalid_argument);
}

// The same actor on the real runtime preset (work-sharing scheduler, 2 threads): the output
// arrives at a blocking receiver. The receive timeout only guards against a hang.
TEST(CoordinatorActorRuntimeTest, DeliversOnThePresetScheduler) {
  caf::actor_system_config cfg;
  runtime::configure(cfg, {}, /*network=*/false);
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys};
  auto forward = [](output_sink_actor::pointer,
                    caf::actor dest) -> output_sink_actor::behavior_type {
    return {[dest](const connector_output& out) { caf::anon_send(dest, out); }};
  };
  auto sink = sys.spawn(forward, caf::actor{self});
  auto coord = spawn_coordinator(sys, sink, {.world_size = 2});
  ASSERT_TRUE(coord.ok());
  self->send(*coord, runtime::expect_atom::value, step_id{0}, std::vector<job_id>{1},
             std::vector<job_id>{});
  for (rank_id r = 0; r < 2; ++r) {
    self->send(*coord, runtime::report_atom::value, r, uint32_t{0}, step_id{0},
               std::vector<completion_event>{event(r, 1, transfer_kind::load)});
  }
  bool received = false;
  self->receive(
      [&](const connector_output& out) {
        received = true;
        ASSERT_EQ(out.jobs.size(), 1u);
        EXPECT_TRUE(out.jobs[0].ok);
      },
      caf::after(std::chrono::seconds(10)) >> [] {});
  EXPECT_TRUE(received);
  caf::anon_send_exit(*coord, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace kvc::coordinator
