#include "actors/coordinator/completion_aggregator.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace kvc::coordinator {
namespace {

constexpr auto load = transfer_kind::load;
constexpr auto store = transfer_kind::store;
constexpr uint64_t grace = 1000;

completion_aggregator make_aggregator(uint32_t world, size_t memory = 4096) {
  auto agg = completion_aggregator::create(
      {.world_size = world, .finished_memory = memory, .straggler_grace = grace});
  EXPECT_TRUE(agg.ok()) << agg.error().to_string();
  return std::move(agg).value();
}

completion_event ok_report(rank_id rank, job_id job, transfer_kind kind = store, step_id step = 0) {
  return {.rank = rank, .step = step, .job = job, .kind = kind, .ok = true};
}

completion_event failed_report(rank_id rank, job_id job, errc why, transfer_kind kind = store) {
  return {.rank = rank, .job = job, .kind = kind, .ok = false, .error = why};
}

/// Closes `step` on every rank of `agg` (incarnation 0) and returns the output, if any.
std::optional<connector_output> close_all(completion_aggregator& agg, step_id step) {
  for (rank_id r = 0; r < agg.world_size(); ++r) {
    EXPECT_TRUE(agg.on_step_closed(r, 0, step).ok());
  }
  return agg.poll_output();
}

TEST(CompletionAggregatorTest, CompletesOnceWhenEveryRankReported) {
  completion_aggregator agg = make_aggregator(/*world=*/4);
  ASSERT_TRUE(agg.expect(7, store, 0, std::nullopt).ok());
  for (rank_id r = 0; r < 3; ++r) {
    EXPECT_EQ(agg.on_report(ok_report(r, 7)), report_outcome::accepted);
  }
  EXPECT_EQ(agg.on_report(ok_report(3, 7)), report_outcome::completed);
  EXPECT_EQ(agg.on_report(ok_report(3, 7)), report_outcome::duplicate);  // ignored

  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_EQ(out.jobs[0], (job_result{.job = 7, .kind = store, .ok = true, .error = errc::ok}));
  EXPECT_TRUE(agg.take_output(1).jobs.empty());
  EXPECT_EQ(agg.tracked_jobs(), 0u);  // memory freed on completion
  EXPECT_EQ(agg.stats().completed, 1u);
}

TEST(CompletionAggregatorTest, FailureShortCircuitsAndStragglersAreAbsorbed) {
  completion_aggregator agg = make_aggregator(4);
  ASSERT_TRUE(agg.expect(1, load, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 1, load)), report_outcome::accepted);
  completion_event cuda = failed_report(2, 1, errc::device_error, load);
  cuda.detail = "cudaEventQuery returned cudaErrorIllegalAddress (700)";
  EXPECT_EQ(agg.on_report(cuda), report_outcome::failed);
  // Decided at once: the result is there before ranks 1 and 3 spoke, naming the failing rank.
  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_FALSE(out.jobs[0].ok);
  EXPECT_EQ(out.jobs[0].error, errc::device_error);
  EXPECT_EQ(out.jobs[0].kind, load);
  EXPECT_EQ(out.jobs[0].detail, "rank 2: cudaEventQuery returned cudaErrorIllegalAddress (700)");

  EXPECT_EQ(agg.on_report(failed_report(2, 1, errc::device_error, load)),
            report_outcome::duplicate);
  EXPECT_EQ(agg.on_report(ok_report(1, 1, load)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 1u);  // still waiting for rank 3's straggler
  EXPECT_EQ(agg.on_report(failed_report(3, 1, errc::device_error, load)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 0u);  // every rank accounted for: freed
  EXPECT_EQ(agg.on_report(ok_report(3, 1, load)), report_outcome::duplicate);
  EXPECT_TRUE(agg.take_output(5).jobs.empty());  // never re-emitted
  EXPECT_EQ(agg.stats().failed, 1u);
  EXPECT_EQ(agg.stats().absorbed, 2u);
}

TEST(CompletionAggregatorTest, FailureWithoutAnErrorCodeCountsAsInternal) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(3, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(failed_report(0, 3, errc::ok)), report_outcome::failed);
  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_EQ(out.jobs[0].error, errc::internal);
  EXPECT_EQ(out.jobs[0].detail, "rank 0");  // the rank gave no words
}

TEST(CompletionAggregatorTest, DuplicatesAreIgnoredAndCounted) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(4, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 4)), report_outcome::accepted);
  EXPECT_EQ(agg.on_report(ok_report(0, 4)), report_outcome::duplicate);  // vLLM would finish here
  EXPECT_TRUE(agg.take_output(0).jobs.empty());
  EXPECT_EQ(agg.on_report(ok_report(1, 4)), report_outcome::completed);
  EXPECT_EQ(agg.on_report(ok_report(1, 4)), report_outcome::duplicate);  // after completion
  EXPECT_EQ(agg.take_output(1).jobs.size(), 1u);
  EXPECT_EQ(agg.stats().duplicates, 2u);
  EXPECT_EQ(agg.stats().completed, 1u);
}

TEST(CompletionAggregatorTest, UnknownRankIsDroppedAndReported) {
  completion_aggregator agg = make_aggregator(4);
  ASSERT_TRUE(agg.expect(2, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(4, 2)), report_outcome::unknown_rank);
  EXPECT_TRUE(is_rejected(report_outcome::unknown_rank));
  EXPECT_EQ(agg.stats().rejected, 1u);
  EXPECT_EQ(agg.on_report(ok_report(99, 8)), report_outcome::unknown_rank);
  EXPECT_EQ(agg.tracked_jobs(), 1u);  // no entry for job 8

  EXPECT_EQ(agg.on_step_closed(4, 0, 0).code(), errc::invalid_argument);
  EXPECT_EQ(agg.on_rank_lost(4).code(), errc::invalid_argument);
  EXPECT_EQ(agg.on_rank_registered(4, 1).code(), errc::invalid_argument);

  for (rank_id r = 0; r < 4; ++r) agg.on_report(ok_report(r, 2));
  EXPECT_EQ(agg.take_output(0).jobs.size(), 1u);  // the bad reports changed nothing
}

TEST(CompletionAggregatorTest, StaleIncarnationIsDroppedAndRestartFailsUnreportedJobs) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  ASSERT_TRUE(agg.expect(2, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(1, 1)), report_outcome::accepted);

  // Rank 1 restarts: job 2, which it had not reported, fails; job 1 keeps its report.
  auto failed = agg.on_rank_registered(1, 1);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(*failed, 1u);
  EXPECT_EQ(agg.on_report(ok_report(1, 2)), report_outcome::stale_incarnation);
  EXPECT_EQ(agg.on_step_closed(1, 0, 0).code(), errc::precondition_failed);
  EXPECT_EQ(agg.on_report(ok_report(0, 1)), report_outcome::completed);

  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 2u);
  EXPECT_EQ(out.jobs[0].job, 2u);
  EXPECT_EQ(out.jobs[0].error, errc::io_error);
  EXPECT_EQ(out.jobs[0].detail, "rank 1 restarted before reporting it");
  EXPECT_EQ(out.jobs[1].job, 1u);
  EXPECT_TRUE(out.jobs[1].detail.empty());
  EXPECT_TRUE(out.jobs[1].ok);

  EXPECT_EQ(agg.on_rank_registered(1, 0).code(), errc::precondition_failed);  // going back
  auto again = agg.on_rank_registered(1, 1);  // same incarnation: idempotent
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
  EXPECT_EQ(agg.stats().rank_restarts, 1u);  // counted once, not for the refused or repeated calls
  completion_event current = ok_report(1, 3);
  current.incarnation = 1;
  ASSERT_TRUE(agg.expect(3, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(current), report_outcome::accepted);
  // One restart counted; the refused and the repeated registrations changed nothing.
  EXPECT_EQ(agg.stats().rank_restarts, 1u);
  EXPECT_EQ(agg.stats().rank_losses, 0u);
}

TEST(CompletionAggregatorTest, UnregisteredFutureIncarnationIsDropped) {
  completion_aggregator agg = make_aggregator(2);
  completion_event ev = ok_report(0, 5);
  ev.incarnation = 1;
  EXPECT_EQ(agg.on_report(ev), report_outcome::future_incarnation);
  EXPECT_EQ(agg.on_step_closed(0, 1, 0).code(), errc::precondition_failed);
  EXPECT_EQ(agg.tracked_jobs(), 0u);
}

TEST(CompletionAggregatorTest, KindMismatchIsDropped) {
  completion_aggregator agg = make_aggregator(1);
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 1, load)), report_outcome::kind_mismatch);
  EXPECT_EQ(agg.on_report(ok_report(0, 1, store)), report_outcome::completed);
}

TEST(CompletionAggregatorTest, AJobExpectedWhileARankIsLostFailsAtOnce) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.on_rank_lost(1).ok());
  ASSERT_TRUE(agg.expect(7, store, 1, std::nullopt).ok());
  EXPECT_EQ(agg.pending_results(), 1u);
  EXPECT_EQ(agg.on_report(ok_report(0, 7, store, 1)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 0u);  // rank 0 reported, rank 1 counts as heard: freed
  ASSERT_TRUE(agg.on_step_closed(0, 0, 1).ok());
  auto out = agg.poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ(out->jobs[0].error, errc::io_error);
  EXPECT_EQ(out->jobs[0].detail, "planned while rank(s) 1 were lost");
  // Once the rank is back, new jobs wait for it again.
  ASSERT_TRUE(agg.on_rank_lost(1).ok());  // lost again while lost: a no-op
  ASSERT_TRUE(agg.on_rank_registered(1, 1).ok());
  EXPECT_EQ(agg.stats().rank_losses, 1u);
  EXPECT_EQ(agg.stats().rank_restarts, 1u);
  ASSERT_TRUE(agg.expect(8, store, 2, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 8, store, 2)), report_outcome::accepted);
}

TEST(CompletionAggregatorTest, RankLossFailsTheJobsWaitingOnIt) {
  completion_aggregator agg = make_aggregator(3);
  for (job_id j : {1, 2, 3}) ASSERT_TRUE(agg.expect(j, store, 0, std::nullopt).ok());
  agg.on_report(ok_report(2, 1));  // job 1: rank 2 has reported
  agg.on_report(ok_report(0, 3));  // job 3: ranks 0 and 1 have, rank 2 has not
  agg.on_report(ok_report(1, 3));

  auto failed = agg.on_rank_lost(2);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(*failed, 2u);  // jobs 2 and 3
  auto twice = agg.on_rank_lost(2);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(*twice, 0u);
  EXPECT_EQ(agg.on_report(ok_report(2, 2)), report_outcome::stale_incarnation);
  agg.on_report(ok_report(0, 1));
  EXPECT_EQ(agg.on_report(ok_report(1, 1)), report_outcome::completed);  // rank 2's report counts

  // The lost rank does not hold the step barrier back.
  ASSERT_TRUE(agg.on_step_closed(0, 0, 0).ok());
  ASSERT_TRUE(agg.on_step_closed(1, 0, 0).ok());
  auto out = agg.poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 3u);
  for (const job_result& r : out->jobs) {
    EXPECT_EQ(r.ok, r.job == 1) << r.job;
    if (!r.ok) {
      EXPECT_EQ(r.error, errc::io_error);
      EXPECT_EQ(r.detail, "rank 2 was lost before reporting it");
    }
  }
  EXPECT_EQ(agg.tracked_jobs(), 1u);  // failed job 2 still absorbs ranks 0 and 1
  EXPECT_EQ(agg.on_report(ok_report(0, 2)), report_outcome::absorbed);
  EXPECT_EQ(agg.on_report(ok_report(1, 2)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 0u);

  EXPECT_EQ(agg.on_rank_registered(2, 0).code(), errc::precondition_failed);  // must bump
  ASSERT_TRUE(agg.on_rank_registered(2, 1).ok());
  EXPECT_EQ(agg.closed_step(), std::optional<step_id>{0});  // rejoins at the barrier
}

TEST(CompletionAggregatorTest, LosingEveryRankFlushesPendingResults) {
  completion_aggregator agg = make_aggregator(1);
  ASSERT_TRUE(agg.expect(1, load, 0, std::nullopt).ok());
  ASSERT_TRUE(agg.on_rank_lost(0).ok());
  EXPECT_FALSE(agg.closed_step().has_value());
  auto out = agg.poll_output();
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0].error, errc::io_error);
  EXPECT_FALSE(agg.poll_output().has_value());
}

TEST(CompletionAggregatorTest, DeadlineExpiryFailsWithTimeout) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(5, store, 0, uint64_t{100}).ok());
  ASSERT_TRUE(agg.expect(6, store, 0, std::nullopt).ok());  // no deadline: never times out
  completion_event ev = ok_report(0, 5);
  ev.bytes = 4096;
  ev.seconds = 0.25;
  agg.on_report(ev);
  ASSERT_TRUE(close_all(agg, 0).has_value());

  EXPECT_TRUE(agg.needs_expire());
  EXPECT_EQ(agg.expire(99), 0u);
  EXPECT_EQ(agg.expire(100), 1u);
  EXPECT_FALSE(agg.poll_output().has_value());  // out-of-band results join the next step
  auto out = close_all(agg, 1);
  ASSERT_TRUE(out.has_value());
  EXPECT_EQ(out->step, 1u);
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0], (job_result{.job = 5,
                                      .kind = store,
                                      .ok = false,
                                      .error = errc::timeout,
                                      .bytes = 4096,
                                      .seconds = 0.25,
                                      .detail = "no report from rank(s) 1 by its deadline"}));
  EXPECT_EQ(agg.stats().timed_out, 1u);

  // The failed job waits `grace` for rank 1's straggler, then is freed but remembered.
  EXPECT_EQ(agg.tracked_jobs(), 2u);
  EXPECT_EQ(agg.expire(100 + grace - 1), 0u);
  EXPECT_EQ(agg.tracked_jobs(), 2u);
  EXPECT_EQ(agg.expire(100 + grace), 0u);
  EXPECT_EQ(agg.tracked_jobs(), 1u);  // job 6 only
  EXPECT_EQ(agg.on_report(ok_report(1, 5)), report_outcome::absorbed);
  EXPECT_EQ(agg.expire(UINT64_MAX), 0u);
  EXPECT_FALSE(agg.needs_expire());
  EXPECT_TRUE(close_all(agg, 2)->jobs.empty());
}

TEST(CompletionAggregatorTest, StragglerAfterTimeoutIsAbsorbed) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(5, store, 0, uint64_t{10}).ok());
  EXPECT_EQ(agg.expire(10), 1u);
  EXPECT_EQ(agg.on_report(ok_report(0, 5)), report_outcome::absorbed);
  EXPECT_EQ(agg.on_report(ok_report(1, 5)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_FALSE(agg.needs_expire());
  EXPECT_EQ(agg.take_output(0).jobs.size(), 1u);
}

TEST(CompletionAggregatorTest, ReportsBeforeExpectAreHeldUntilExpected) {
  completion_aggregator agg = make_aggregator(2);
  EXPECT_EQ(agg.on_report(ok_report(0, 9, load, 3)), report_outcome::accepted);
  EXPECT_EQ(agg.on_report(ok_report(1, 9, load, 4)), report_outcome::completed);
  EXPECT_TRUE(agg.take_output(10).jobs.empty());  // no result for a job the scheduler never named
  EXPECT_EQ(agg.tracked_jobs(), 1u);
  ASSERT_TRUE(agg.expect(9, load, 2, std::nullopt).ok());
  connector_output out = agg.take_output(11);
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_TRUE(out.jobs[0].ok);
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_EQ(agg.expect(9, load, 2, std::nullopt).code(), errc::invalid_argument);
}

TEST(CompletionAggregatorTest, ExpectDisagreeingWithWorkersFailsTheJob) {
  completion_aggregator agg = make_aggregator(2);
  agg.on_report(ok_report(0, 9, load));
  ASSERT_TRUE(agg.expect(9, store, 0, std::nullopt).ok());
  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_EQ(out.jobs[0].kind, store);
  EXPECT_EQ(out.jobs[0].error, errc::protocol_mismatch);
  EXPECT_EQ(out.jobs[0].detail, "the workers reported it as another kind");
}

TEST(CompletionAggregatorTest, NeverExpectedJobIsDroppedAfterTheGrace) {
  completion_aggregator agg = make_aggregator(2);
  agg.on_report(ok_report(0, 4));
  EXPECT_TRUE(agg.needs_expire());
  EXPECT_EQ(agg.expire(5000), 0u);  // starts the grace period
  EXPECT_EQ(agg.expire(5000 + grace - 1), 0u);
  EXPECT_EQ(agg.tracked_jobs(), 1u);
  EXPECT_EQ(agg.expire(5000 + grace), 0u);
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_EQ(agg.stats().orphans_dropped, 1u);
  EXPECT_EQ(agg.stats().failed + agg.stats().completed, 0u);  // nothing is ever emitted for it
  EXPECT_FALSE(agg.needs_expire());
}

TEST(CompletionAggregatorTest, ExpectRejectsDuplicatesAndChangesNothing) {
  completion_aggregator agg = make_aggregator(1);
  ASSERT_TRUE(agg.expect(1, store, 0, uint64_t{50}).ok());
  EXPECT_EQ(agg.expect(1, load, 0, uint64_t{10}).code(), errc::invalid_argument);
  EXPECT_EQ(agg.expire(10), 0u);  // the rejected call did not move the deadline
  EXPECT_EQ(agg.on_report(ok_report(0, 1, store)), report_outcome::completed);
  EXPECT_EQ(agg.expect(1, store, 0, std::nullopt).code(), errc::invalid_argument);
  EXPECT_FALSE(agg.needs_expire());
}

TEST(CompletionAggregatorTest, StepBarrierEmitsOneOutputPerStep) {
  completion_aggregator agg = make_aggregator(2);
  EXPECT_FALSE(agg.poll_output().has_value());
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  agg.on_report(ok_report(0, 1, store, 0));
  agg.on_report(ok_report(1, 1, store, 1));  // rank 1 saw it complete one step later
  ASSERT_TRUE(agg.on_step_closed(0, 0, 0).ok());
  EXPECT_FALSE(agg.poll_output().has_value());  // rank 1 has closed nothing
  ASSERT_TRUE(agg.on_step_closed(1, 0, 0).ok());
  auto out0 = agg.poll_output();
  ASSERT_TRUE(out0.has_value());
  EXPECT_EQ(out0->step, 0u);
  EXPECT_TRUE(out0->jobs.empty());  // job 1's last report belongs to step 1
  EXPECT_FALSE(agg.poll_output().has_value());

  ASSERT_TRUE(agg.on_step_closed(0, 0, 1).ok());
  ASSERT_TRUE(agg.on_step_closed(1, 0, 2).ok());
  auto out1 = agg.poll_output();
  ASSERT_TRUE(out1.has_value());
  EXPECT_EQ(out1->step, 1u);
  ASSERT_EQ(out1->jobs.size(), 1u);
  ASSERT_TRUE(agg.on_step_closed(0, 0, 2).ok());
  auto out2 = agg.poll_output();
  ASSERT_TRUE(out2.has_value());
  EXPECT_EQ(out2->step, 2u);

  EXPECT_EQ(agg.on_step_closed(0, 0, 1).code(), errc::invalid_argument);  // backwards
  EXPECT_EQ(agg.closed_step(), std::optional<step_id>{2});
}

// vLLM §9 item 30 (KVOutputAggregator, expected 2), adapted to jobs: "finished sending/recving"
// are successful stores/loads, "invalid block ids" failed loads; one output per step.
TEST(CompletionAggregatorTest, VllmAggregatorScenarioWorldTwo) {
  completion_aggregator agg = make_aggregator(2);
  auto empty = close_all(agg, 0);  // two empty outputs -> one empty output
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->jobs.empty());

  ASSERT_TRUE(agg.expect(1, store, 1, std::nullopt).ok());  // "send r1"
  ASSERT_TRUE(agg.expect(2, load, 1, std::nullopt).ok());   // "recv r2"
  ASSERT_TRUE(agg.expect(3, load, 1, std::nullopt).ok());
  agg.on_report(ok_report(0, 1, store, 1));
  agg.on_report(ok_report(0, 2, load, 1));
  auto step1 = close_all(agg, 1);
  ASSERT_TRUE(step1.has_value());
  EXPECT_TRUE(step1->jobs.empty());  // nothing finished on both ranks

  agg.on_report(ok_report(1, 1, store, 2));
  agg.on_report(failed_report(0, 3, errc::device_error, load));
  auto step2 = close_all(agg, 2);
  ASSERT_TRUE(step2.has_value());
  ASSERT_EQ(step2->jobs.size(), 2u);
  EXPECT_EQ(step2->jobs[0].job, 1u);  // sending {r1}
  EXPECT_TRUE(step2->jobs[0].ok);
  EXPECT_EQ(step2->jobs[1].job, 3u);  // the failed load
  EXPECT_FALSE(step2->jobs[1].ok);

  agg.on_report(ok_report(1, 2, load, 3));
  // Both ranks report job 3 invalid: one failure, not two.
  EXPECT_EQ(agg.on_report(failed_report(1, 3, errc::device_error, load)), report_outcome::absorbed);
  auto step3 = close_all(agg, 3);
  ASSERT_TRUE(step3.has_value());
  ASSERT_EQ(step3->jobs.size(), 1u);
  EXPECT_EQ(step3->jobs[0].job, 2u);  // recving {r2}
  EXPECT_EQ(agg.tracked_jobs(), 0u);
}

// vLLM §9 item 31 (expected 4), adapted: counts persist across steps, and a repeated report does
// not count twice (vLLM's aggregator would finish r1 early).
TEST(CompletionAggregatorTest, VllmAggregatorScenarioWorldFour) {
  completion_aggregator agg = make_aggregator(4);
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 1, store, 0)), report_outcome::accepted);  // 3 remaining
  EXPECT_TRUE(close_all(agg, 0)->jobs.empty());
  EXPECT_EQ(agg.on_report(ok_report(0, 1, store, 1)), report_outcome::duplicate);
  EXPECT_EQ(agg.on_report(ok_report(1, 1, store, 1)), report_outcome::accepted);
  EXPECT_TRUE(close_all(agg, 1)->jobs.empty());
  EXPECT_EQ(agg.on_report(ok_report(2, 1, store, 2)), report_outcome::accepted);
  EXPECT_TRUE(close_all(agg, 2)->jobs.empty());
  EXPECT_EQ(agg.on_report(ok_report(3, 1, store, 3)), report_outcome::completed);
  auto out = close_all(agg, 3);
  ASSERT_TRUE(out.has_value());
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_EQ(out->jobs[0].job, 1u);
}

TEST(CompletionAggregatorTest, BytesAreSummedAndSecondsMaxedOverRanks) {
  completion_aggregator agg = make_aggregator(3);
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  ASSERT_TRUE(agg.expect(2, load, 0, std::nullopt).ok());
  const uint64_t bytes[] = {100, 200, 300};
  const double seconds[] = {0.5, 1.5, 1.0};
  for (rank_id r = 0; r < 3; ++r) {
    completion_event ev = ok_report(r, 1);
    ev.bytes = bytes[r];
    ev.seconds = seconds[r];
    agg.on_report(ev);
  }
  completion_event good = ok_report(0, 2, load);
  good.bytes = 64;
  good.seconds = 2.0;
  agg.on_report(good);
  completion_event bad = failed_report(1, 2, errc::device_error, load);
  bad.bytes = 32;
  bad.seconds = 0.5;
  agg.on_report(bad);
  completion_event late = ok_report(2, 2, load);
  late.bytes = 1000;  // after the failure: not counted
  late.seconds = 9.0;
  agg.on_report(late);

  connector_output out = agg.take_output(0);
  ASSERT_EQ(out.jobs.size(), 2u);
  EXPECT_EQ(out.jobs[0].job, 1u);
  EXPECT_EQ(out.jobs[0].bytes, 600u);
  EXPECT_DOUBLE_EQ(out.jobs[0].seconds, 1.5);
  EXPECT_EQ(out.jobs[1].job, 2u);
  EXPECT_EQ(out.jobs[1].bytes, 96u);
  EXPECT_DOUBLE_EQ(out.jobs[1].seconds, 2.0);
}

TEST(CompletionAggregatorTest, FinishedMemoryIsBounded) {
  completion_aggregator agg = make_aggregator(1, /*memory=*/2);
  for (job_id j = 1; j <= 3; ++j) {
    ASSERT_TRUE(agg.expect(j, store, 0, std::nullopt).ok());
    EXPECT_EQ(agg.on_report(ok_report(0, j)), report_outcome::completed);
  }
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_EQ(agg.remembered_jobs(), 2u);
  EXPECT_EQ(agg.on_report(ok_report(0, 3)), report_outcome::duplicate);
  // Job 1 is forgotten: its late duplicate is tracked as a new, never-expected job (no result),
  // and dropped after the grace.
  EXPECT_EQ(agg.on_report(ok_report(0, 1)), report_outcome::completed);
  EXPECT_EQ(agg.take_output(0).jobs.size(), 3u);
  agg.expire(0);
  agg.expire(grace);
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_EQ(agg.stats().orphans_dropped, 1u);
}

TEST(CompletionAggregatorTest, SequenceGapsAreCounted) {
  completion_aggregator agg = make_aggregator(2);
  completion_event ev = ok_report(0, 1);
  ev.seq = 0;
  agg.on_report(ev);
  ev.job = 2;
  ev.seq = 3;  // seq 1 and 2 never arrived
  agg.on_report(ev);
  EXPECT_EQ(agg.stats().sequence_gaps, 2u);
  ASSERT_TRUE(agg.on_rank_registered(0, 1).ok());  // a new incarnation counts from 0 again
  ev.incarnation = 1;
  ev.job = 3;
  ev.seq = 0;
  agg.on_report(ev);
  EXPECT_EQ(agg.stats().sequence_gaps, 2u);
}

TEST(CompletionAggregatorTest, InvalidWorldSizeIsRejected) {
  EXPECT_EQ(completion_aggregator::create({.world_size = 0}).code(), errc::invalid_argument);
  EXPECT_EQ(completion_aggregator::create({.world_size = max_world_size + 1}).code(),
            errc::invalid_argument);
  auto big = completion_aggregator::create({.world_size = max_world_size});
  ASSERT_TRUE(big.ok());
  completion_aggregator agg = std::move(big).value();
  ASSERT_TRUE(agg.expect(1, store, 0, std::nullopt).ok());
  for (rank_id r = 0; r + 1 < max_world_size; ++r) {
    ASSERT_EQ(agg.on_report(ok_report(r, 1)), report_outcome::accepted);
  }
  EXPECT_EQ(agg.on_report(ok_report(max_world_size - 1, 1)), report_outcome::completed);
}

TEST(CompletionAggregatorTest, AStepDeadlineFailsTheJobAndLateReportsAreCounted) {
  completion_aggregator agg = make_aggregator(2);
  ASSERT_TRUE(agg.expect(1, store, 3, std::nullopt, /*step_deadline=*/5).ok());
  ASSERT_TRUE(agg.expect(2, store, 3, std::nullopt, /*step_deadline=*/5).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 1)), report_outcome::accepted);
  EXPECT_EQ(agg.on_report(ok_report(0, 2)), report_outcome::accepted);
  EXPECT_EQ(agg.on_report(ok_report(1, 2)), report_outcome::completed);  // done: no deadline
  ASSERT_TRUE(agg.expect(3, store, 4, std::nullopt, 6).ok());
  EXPECT_EQ(agg.expire_steps(4, 0), 0u);
  EXPECT_EQ(agg.expire_steps(5, 100), 1u);  // job 1; job 3's deadline is step 6
  connector_output out = agg.take_output(5);
  ASSERT_EQ(out.jobs.size(), 2u);
  EXPECT_TRUE(out.jobs[0].ok);
  EXPECT_EQ(out.jobs[1].job, 1u);
  EXPECT_EQ(out.jobs[1].error, errc::timeout);
  EXPECT_EQ(agg.stats().timed_out, 1u);
  // Rank 1's report comes after the deadline: absorbed, counted as late, no second result.
  EXPECT_EQ(agg.on_report(ok_report(1, 1)), report_outcome::absorbed);
  EXPECT_EQ(agg.stats().late, 1u);
  EXPECT_EQ(agg.stats().absorbed, 1u);
  EXPECT_TRUE(agg.take_output(6).jobs.empty());
  // A late duplicate of a job freed after its deadline is late too.
  ASSERT_TRUE(agg.expect(4, store, 6, std::nullopt, 7).ok());
  EXPECT_TRUE(agg.needs_expire_steps());
  EXPECT_EQ(agg.expire_steps(7, 200), 2u);  // jobs 3 and 4
  EXPECT_FALSE(agg.needs_expire_steps());
  EXPECT_EQ(agg.tracked_jobs(), 2u);  // failed, awaiting stragglers (job 1 heard from all)
  EXPECT_EQ(agg.expire(200 + grace), 0u);  // the straggler windows end: freed, not failed again
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  EXPECT_EQ(agg.on_report(ok_report(0, 4)), report_outcome::absorbed);
  EXPECT_EQ(agg.stats().late, 2u);
  EXPECT_EQ(agg.stats().timed_out, 3u);
}

TEST(CompletionAggregatorTest, OutcomeNamesAreStable) {
  EXPECT_EQ(to_string(report_outcome::accepted), "accepted");
  EXPECT_EQ(to_string(report_outcome::stale_incarnation), "stale_incarnation");
  EXPECT_EQ(to_string(report_outcome::kind_mismatch), "kind_mismatch");
  EXPECT_FALSE(is_rejected(report_outcome::duplicate));
  EXPECT_FALSE(is_rejected(report_outcome::absorbed));
  EXPECT_TRUE(is_rejected(report_outcome::future_incarnation));
}

TEST(CompletionAggregatorTest, JobsTheEngineDecidedAreForgottenWithNoResultAndLateReportsAbsorbed) {
  completion_aggregator agg = make_aggregator(/*world=*/2);
  ASSERT_TRUE(agg.expect(1, store, 0, /*deadline=*/100, /*step_deadline=*/5).ok());
  ASSERT_TRUE(agg.expect(2, load, 0, /*deadline=*/100, /*step_deadline=*/5).ok());
  ASSERT_TRUE(agg.expect(3, store, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(ok_report(0, 2, load)), report_outcome::accepted);

  const std::vector<job_id> engine_decided{1, 2, 99};  // 99: never tracked, skipped
  EXPECT_EQ(agg.forget_jobs(engine_decided), 2u);
  EXPECT_EQ(agg.stats().forgotten, 2u);
  EXPECT_EQ(agg.tracked_jobs(), 1u);  // job 3 still waits
  EXPECT_EQ(agg.table_sizes().deadlines, 0u);
  EXPECT_FALSE(agg.needs_expire_steps());  // their step deadlines went with them

  // No result, no timeout: the deadlines pass and only job 3 is ever decided.
  EXPECT_EQ(agg.expire(1000), 0u);
  EXPECT_EQ(agg.expire_steps(10, 1000), 0u);
  EXPECT_EQ(agg.stats().timed_out, 0u);
  EXPECT_TRUE(agg.take_output(0).jobs.empty());
  // A worker's late word on a settled job is absorbed, never a second result or a new entry.
  EXPECT_EQ(agg.on_report(ok_report(1, 2, load)), report_outcome::absorbed);
  EXPECT_EQ(agg.on_report(ok_report(0, 1)), report_outcome::absorbed);
  EXPECT_EQ(agg.tracked_jobs(), 1u);
  EXPECT_TRUE(agg.take_output(1).jobs.empty());
  // Expecting a settled id again is refused, as for any finished job.
  EXPECT_FALSE(agg.expect(1, store, 2, std::nullopt).ok());
}

TEST(CompletionAggregatorTest, ForgettingADecidedJobKeepsItsPendingResult) {
  completion_aggregator agg = make_aggregator(/*world=*/2);
  ASSERT_TRUE(agg.expect(4, load, 0, std::nullopt).ok());
  EXPECT_EQ(agg.on_report(failed_report(0, 4, errc::device_error, load)), report_outcome::failed);
  const std::vector<job_id> engine_decided{4};
  EXPECT_EQ(agg.forget_jobs(engine_decided), 1u);  // it waited for rank 1's straggler
  EXPECT_EQ(agg.tracked_jobs(), 0u);
  connector_output out = agg.take_output(0);  // decided before: still handed out, once
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_EQ(out.jobs[0].job, 4u);
  EXPECT_FALSE(out.jobs[0].ok);
  EXPECT_TRUE(agg.take_output(1).jobs.empty());
}

}  // namespace
}  // namespace kvc::coordinator
