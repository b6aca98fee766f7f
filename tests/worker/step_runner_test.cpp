#include "actors/worker/step_runner.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "actors/worker/completion_stamper.hpp"
#include "tests/worker/synthetic_rank.hpp"

namespace kvc::worker {
namespace {

using testing::load_job;
using testing::step_meta;
using testing::store_job;
using testing::synthetic_rank;

class StepRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto rt = rank_.make();
    ASSERT_TRUE(rt.ok()) << rt.error().to_string();
    runtime_ = std::move(rt).value();
    runner_.emplace(runtime_->worker(), /*rank=*/0, /*incarnation=*/3);
  }

  std::vector<step_report> execute(const connector_metadata& meta, errc expected = errc::ok) {
    std::vector<step_report> out;
    status s = runner_->execute(meta, out);
    EXPECT_EQ(s.code(), expected) << s.to_string();
    return out;
  }

  /// Waits on the engine (no sleeps), then polls.
  std::optional<step_report> finish() {
    EXPECT_TRUE(runtime_->worker().wait_in_flight().ok());
    return runner_->poll();
  }

  synthetic_rank rank_;
  std::unique_ptr<rank_runtime> runtime_;
  std::optional<step_runner> runner_;
};

TEST_F(StepRunnerTest, ExecutesAStoreAndReportsItOnceFinished) {
  auto now = execute(step_meta(1, {}, {store_job(10, {2}, {3, 4})}));
  std::optional<step_report> r;
  if (now.empty()) {
    EXPECT_TRUE(runner_->step_open());
    r = finish();
  } else {  // the copy finished before the first poll
    ASSERT_EQ(now.size(), 1u);
    r = now[0];
  }
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(runner_->step_open());
  EXPECT_EQ(r->step, 1u);
  ASSERT_EQ(r->events.size(), 1u);
  const completion_event& ev = r->events[0];
  EXPECT_EQ(ev.job, 10u);
  EXPECT_TRUE(ev.ok);
  EXPECT_EQ(ev.kind, transfer_kind::store);
  EXPECT_EQ(ev.rank, 0u);
  EXPECT_EQ(ev.incarnation, 3u);
  EXPECT_EQ(ev.seq, 0u);
  EXPECT_EQ(ev.step, 1u);
  EXPECT_EQ(ev.bytes, rank_.kv.slot_bytes());
  EXPECT_TRUE(rank_.slot_holds(2, {3, 4}));
  EXPECT_EQ(runner_->poll(), std::nullopt);  // closed: nothing more to report
}

TEST_F(StepRunnerTest, StoreThenLoadBringsTheBytesBack) {
  execute(step_meta(1, {}, {store_job(1, {0}, {5, 6})}));
  finish();
  execute(step_meta(2, {load_job(2, {0}, {9, 10})}));
  finish();
  EXPECT_TRUE(rank_.gpu_block_holds(9, 5));
  EXPECT_TRUE(rank_.gpu_block_holds(10, 6));
  EXPECT_EQ(runner_->next_seq(), 2u);
}

TEST_F(StepRunnerTest, TheNextStepClosesAnOpenStepAndLaterEventsJoinIt) {
  rank_.sim->pause(cuda::direction::gpu_to_cpu);
  EXPECT_TRUE(execute(step_meta(1, {}, {store_job(7, {1}, {1, 2})})).empty());
  EXPECT_TRUE(runner_->step_open());
  EXPECT_EQ(runner_->poll(), std::nullopt);  // still in flight behind the closed gate

  auto reports = execute(step_meta(2));
  ASSERT_EQ(reports.size(), 1u);  // step 1 closed, without its (unfinished) store
  EXPECT_EQ(reports[0], (step_report{1, {}}));
  EXPECT_TRUE(runner_->step_open());  // step 2 waits for the store

  rank_.sim->resume(cuda::direction::gpu_to_cpu);
  auto r = finish();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->step, 2u);
  ASSERT_EQ(r->events.size(), 1u);
  EXPECT_EQ(r->events[0].job, 7u);
  EXPECT_EQ(r->events[0].step, 2u);  // observed in step 2
  EXPECT_EQ(r->events[0].seq, 0u);
  EXPECT_TRUE(rank_.slot_holds(1, {1, 2}));
}

TEST_F(StepRunnerTest, RefusesStepsThatDoNotIncrease) {
  execute(step_meta(4));
  finish();
  std::vector<step_report> out;
  status s = runner_->execute(step_meta(4, {}, {store_job(1, {0}, {1, 2})}), out);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(runner_->step_open());
  EXPECT_EQ(runtime_->worker().jobs_known(), 0u);  // nothing was bound
  EXPECT_EQ(runner_->last_step(), 4u);
}

TEST_F(StepRunnerTest, RefusedMetadataStillClosesItsStep) {
  // A job id twice in one metadata: the worker refuses the whole metadata.
  auto reports = execute(step_meta(1, {}, {store_job(1, {0}, {1, 2}), store_job(1, {1}, {3, 4})}),
                         errc::invalid_argument);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0], (step_report{1, {}}));
  EXPECT_FALSE(runner_->step_open());
}

TEST_F(StepRunnerTest, FailedJobsAreReportedAsFailed) {
  // Slot 9 does not exist (4 slots): both jobs fail before reaching the engine.
  auto reports = execute(step_meta(1, {load_job(1, {9}, {1, 2})}, {store_job(2, {9}, {3, 4})}));
  std::optional<step_report> r = reports.empty() ? finish() : std::optional{reports[0]};
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->events.size(), 2u);
  for (const auto& ev : r->events) {
    EXPECT_FALSE(ev.ok);
    EXPECT_NE(ev.error, errc::ok);
  }
  EXPECT_EQ(r->events[0].seq, 0u);
  EXPECT_EQ(r->events[1].seq, 1u);
  EXPECT_EQ(runner_->load_error_blocks(), 2u);  // the failed load's GPU blocks
}

TEST(CompletionStamperTest, NumbersEventsPerSenderWithoutGaps) {
  completion_stamper s{2, 5};
  std::vector<job_result> a{{.job = 1, .kind = transfer_kind::load, .ok = true, .bytes = 10},
                            {.job = 2,
                             .kind = transfer_kind::store,
                             .ok = false,
                             .error = errc::device_error,
                             .seconds = 0.5}};
  auto e1 = s.stamp(7, a);
  auto e2 = s.stamp(8, {});
  auto e3 = s.stamp(9, std::vector<job_result>{{.job = 3}});
  ASSERT_EQ(e1.size(), 2u);
  EXPECT_TRUE(e2.empty());
  ASSERT_EQ(e3.size(), 1u);
  EXPECT_EQ(e1[0], (completion_event{.rank = 2,
                                     .incarnation = 5,
                                     .seq = 0,
                                     .step = 7,
                                     .job = 1,
                                     .kind = transfer_kind::load,
                                     .ok = true,
                                     .bytes = 10}));
  EXPECT_EQ(e1[1].seq, 1u);
  EXPECT_EQ(e1[1].error, errc::device_error);
  EXPECT_EQ(e1[1].seconds, 0.5);
  EXPECT_EQ(e3[0].seq, 2u);
  EXPECT_EQ(e3[0].step, 9u);
  EXPECT_EQ(s.next_seq(), 3u);
}

}  // namespace
}  // namespace kvc::worker
