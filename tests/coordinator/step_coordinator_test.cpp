// The coordinator's recovery rules (step_coordinator, pure): deadlines on by default, by time
// and by steps; a deadline releases the results even while a silent rank holds the step barrier
// back; a lost rank's pending jobs fail at once.
#include "actors/coordinator/step_coordinator.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::coordinator {
namespace {

connector_metadata step_with_load(step_id s, job_id job) {
  connector_metadata m;
  m.step = s;
  if (job != 0) m.loads.push_back({.id = job, .kind = transfer_kind::load});
  return m;
}

step_report report(rank_id rank, step_id s, std::vector<job_id> done) {
  step_report r{rank, 0, s, {}};
  for (job_id j : done) {
    r.events.push_back(
        {.rank = rank, .step = s, .job = j, .kind = transfer_kind::load, .ok = true, .bytes = 1});
  }
  return r;
}

std::vector<job_result> drain(step_coordinator& c) {
  std::vector<job_result> out;
  while (auto o = c.poll_output()) out.insert(out.end(), o->jobs.begin(), o->jobs.end());
  return out;
}

TEST(StepCoordinatorTest, DeadlinesAreOnByDefault) {
  const coordinator_options d;
  EXPECT_EQ(d.job_timeout, std::chrono::seconds{30});
  EXPECT_EQ(d.job_timeout_steps, 1000u);
  EXPECT_TRUE(validate(d).ok());
  auto c = step_coordinator::create({.world_size = 2});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(0, 7), 0);
  c->report(report(0, 0, {7}));
  c->report(report(1, 0, {}));  // rank 1 closes step 0 without the job
  EXPECT_TRUE(drain(*c).empty());
  EXPECT_TRUE(c->needs_tick());
  c->tick(30'000'000'000 - 1);
  EXPECT_TRUE(drain(*c).empty());
  c->tick(30'000'000'000);
  const auto out = drain(*c);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error, errc::timeout);
}

TEST(StepCoordinatorTest, AStepWithoutJobsWhoseReportWasLostIsReleasedAtItsDeadline) {
  // Rank 1's report of step 1 (no job) never came: an engine waiting for step 1's output must
  // get it at the step's deadline, not wait for a later step that it will not plan meanwhile.
  auto c = step_coordinator::create(
      {.world_size = 2, .job_timeout = std::chrono::nanoseconds{100}, .job_timeout_steps = 0});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(1, 0), 1000);
  c->report(report(0, 1, {}));
  EXPECT_EQ(c->poll_output(), std::nullopt);
  ASSERT_TRUE(c->needs_tick());
  c->tick(1099);
  EXPECT_EQ(c->poll_output(), std::nullopt);
  c->tick(1100);
  auto out = c->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 1u);
  EXPECT_TRUE(out->jobs.empty());
  EXPECT_EQ(c->poll_output(), std::nullopt);  // once
  // The silent rank goes on with step 2: the barrier passes the released step again.
  c->expect(step_with_load(2, 21), 2000);
  c->report(report(0, 2, {21}));
  c->report(report(1, 2, {21}));
  out = c->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 2u);
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_TRUE(out->jobs[0].ok);
  c->tick(5000);  // step 2 was released by its barrier: no deadline left to fire
  EXPECT_EQ(c->poll_output(), std::nullopt);
  EXPECT_FALSE(c->needs_tick());
}

TEST(StepCoordinatorTest, AStepWhoseReportWasLostIsReleasedThatManyStepsLaterWithoutAClock) {
  // Deadlines in steps only: an engine that goes on planning (it takes what has arrived instead
  // of waiting for each step's output) gets step 1's output once step 1 + 3 is planned, at no
  // time at all: the run is the same whatever the clock says.
  auto c = step_coordinator::create(
      {.world_size = 2, .job_timeout = std::chrono::nanoseconds{0}, .job_timeout_steps = 3});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(1, 0), 0);
  c->report(report(0, 1, {}));  // rank 1 is silent from step 1 on (hung, reports lost)
  c->tick(UINT64_MAX - 1);      // no time deadline: the clock releases nothing
  EXPECT_EQ(c->poll_output(), std::nullopt);
  for (step_id s = 2; s <= 3; ++s) {
    c->expect(step_with_load(s, 0), 0);
    c->report(report(0, s, {}));
  }
  EXPECT_EQ(c->poll_output(), std::nullopt) << "the barrier holds until step 1's deadline";
  c->expect(step_with_load(4, 0), 0);  // step 1 + 3
  auto out = c->poll_output();
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 4u);  // the release covers every planned step
  EXPECT_EQ(c->poll_output(), std::nullopt);  // once
  auto notes = c->take_notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().text.find("step 1 not closed by every rank within its deadline (steps)"),
            std::string::npos);
}

TEST(StepCoordinatorTest, AStepDeadlineFailsAJobOnceThatManyStepsWerePlanned) {
  auto c = step_coordinator::create(
      {.world_size = 2, .job_timeout = std::chrono::nanoseconds{0}, .job_timeout_steps = 3});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(1, 11), 0);
  c->report(report(0, 1, {11}));
  c->report(report(1, 1, {}));
  for (step_id s = 2; s <= 3; ++s) {
    c->expect(step_with_load(s, 0), 0);
    c->report(report(0, s, {}));
    c->report(report(1, s, {}));
  }
  EXPECT_TRUE(drain(*c).empty());
  c->expect(step_with_load(4, 0), 0);  // step 1 + 3: job 11's deadline
  const auto out = drain(*c);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job, 11u);
  EXPECT_EQ(out[0].error, errc::timeout);
  auto notes = c->take_notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.back().text.find("timed out (steps)"), std::string::npos);
}

TEST(StepCoordinatorTest, ADeadlineReleasesResultsWhileASilentRankHoldsTheBarrierBack) {
  auto c =
      step_coordinator::create({.world_size = 2, .job_timeout = std::chrono::nanoseconds{100}});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(1, 5), 0);
  c->report(report(0, 1, {5}));  // rank 1 never reports again (dropped, hung)
  c->expect(step_with_load(2, 6), 10);
  c->report(report(0, 2, {6}));
  EXPECT_TRUE(drain(*c).empty()) << "the barrier holds: rank 1 closed no step";
  c->tick(100);
  auto out = drain(*c);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job, 5u);
  EXPECT_EQ(out[0].error, errc::timeout);
  c->tick(110);
  out = drain(*c);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].job, 6u);
  EXPECT_TRUE(drain(*c).empty());  // released once
  // Rank 1 comes back and reports both late: counted, nothing released twice.
  c->report(report(1, 1, {5}));
  c->report(report(1, 2, {6}));
  EXPECT_TRUE(drain(*c).empty());
  EXPECT_EQ(c->stats().late, 2u);
}

TEST(StepCoordinatorTest, ALostRankFailsItsPendingJobsAtOnce) {
  auto c = step_coordinator::create({.world_size = 3});
  ASSERT_TRUE(c.ok());
  c->expect(step_with_load(1, 9), 0);
  c->report(report(0, 1, {9}));
  c->report(report(2, 1, {9}));
  c->rank_down(1);
  const auto out = drain(*c);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error, errc::io_error);
  EXPECT_EQ(c->aggregator().tracked_jobs(), 0u);
}

}  // namespace
}  // namespace kvc::coordinator
