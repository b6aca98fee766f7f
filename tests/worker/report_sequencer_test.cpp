// report_sequencer: one report per step, in step order, results between reports held.
#include "actors/worker/report_sequencer.hpp"

#include <gtest/gtest.h>

namespace kvc::worker {
namespace {

rank_job_result ok_load(job_id id) {
  return {id, transfer_kind::load, true, errc::ok, 64, 0.0};
}

TEST(ReportSequencerTest, FirstGetFinishedOfAStepReleasesItsReport) {
  report_sequencer seq{3, 1};
  ASSERT_TRUE(seq.open(1).ok());
  auto b = seq.add({ok_load(7)});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->step, 1u);
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_EQ(b->events[0].job, 7u);
  EXPECT_FALSE(seq.close().has_value());  // already reported
  EXPECT_FALSE(seq.is_open());
}

TEST(ReportSequencerTest, LaterResultsOfTheSameStepGoWithTheNextReport) {
  report_sequencer seq{3, 1};
  ASSERT_TRUE(seq.open(1).ok());
  ASSERT_TRUE(seq.add({}).has_value());
  EXPECT_FALSE(seq.add({ok_load(8)}).has_value());
  EXPECT_EQ(seq.held(), 1u);
  EXPECT_FALSE(seq.close().has_value());
  EXPECT_FALSE(seq.add({ok_load(9)}).has_value());  // between steps: held as well
  ASSERT_TRUE(seq.open(2).ok());
  auto b = seq.add({});
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->step, 2u);
  ASSERT_EQ(b->events.size(), 2u);
  EXPECT_EQ(b->events[0].job, 8u);
  EXPECT_EQ(b->events[1].job, 9u);
  EXPECT_EQ(seq.held(), 0u);
}

TEST(ReportSequencerTest, CloseReportsAStepWithoutGetFinished) {
  report_sequencer seq{3, 1};
  EXPECT_FALSE(seq.add({ok_load(3)}).has_value());
  ASSERT_TRUE(seq.open(4).ok());
  auto b = seq.close();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->step, 4u);
  ASSERT_EQ(b->events.size(), 1u);
  EXPECT_EQ(b->events[0].job, 3u);
  EXPECT_FALSE(seq.close().has_value());  // nothing open any more
}

TEST(ReportSequencerTest, StepsMustGoUpAndOneAtATime) {
  report_sequencer seq{3, 1};
  ASSERT_TRUE(seq.open(5).ok());
  EXPECT_EQ(seq.open(6).code(), errc::precondition_failed);  // 5 is still open
  ASSERT_TRUE(seq.close().has_value());
  EXPECT_EQ(seq.open(5).code(), errc::invalid_argument);
  EXPECT_EQ(seq.open(3).code(), errc::invalid_argument);
  EXPECT_EQ(seq.last_step(), std::optional<step_id>{5});  // the refusals changed nothing
  EXPECT_TRUE(seq.open(6).ok());
}

TEST(ReportSequencerTest, EventsNameTheRankAndItsStepAndAreNumberedWithoutGaps) {
  report_sequencer seq{3, 1};
  ASSERT_TRUE(seq.open(1).ok());
  auto first = seq.add({ok_load(7), ok_load(8)});
  ASSERT_TRUE(seq.close() == std::nullopt);
  ASSERT_TRUE(seq.open(2).ok());
  auto second = seq.close();
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_EQ(first->rank, 3u);
  EXPECT_EQ(first->incarnation, 1u);
  ASSERT_EQ(first->events.size(), 2u);
  for (uint64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(first->events[i].seq, i);
    EXPECT_EQ(first->events[i].step, 1u);
    EXPECT_EQ(first->events[i].rank, 3u);
    EXPECT_EQ(first->events[i].incarnation, 1u);
  }
  EXPECT_TRUE(second->events.empty());  // an empty report still closes step 2
  EXPECT_EQ(second->step, 2u);
  EXPECT_EQ(seq.next_seq(), 2u);
}

}  // namespace
}  // namespace kvc::worker
