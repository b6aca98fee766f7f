// The channel's fault seam: faulty_server_transport over the memory transport, under the real
// scheduler_channel and step_coordinator. Each test injects one kind of fault into the step
// reports and checks what the coordinator makes of it. Deterministic: one thread, the memory
// transport delivers a frame before send returns, time is passed in.
#include "actors/channel/faulty_server_transport.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/channel/memory_transport.hpp"
#include "actors/channel/rank_channel.hpp"
#include "actors/channel/scheduler_channel.hpp"
#include "actors/coordinator/step_coordinator.hpp"
#include "proto/fault_spec_parser.hpp"

namespace kvc::channel {
namespace {

using namespace std::chrono_literals;
using coordinator::step_coordinator;

constexpr uint64_t timeout_ns = 1'000'000'000;

class FaultySeamTest : public ::testing::Test {
 protected:
  /// World of `world` ranks, the channel faults of `specs` (seed 1).
  void start(uint32_t world, const std::vector<std::string>& specs) {
    fault_config cfg{.seed = 1, .specs = {}};
    for (const auto& text : specs) {
      auto f = parse_fault_spec(text);
      ASSERT_TRUE(f.ok()) << f.error().to_string();
      cfg.specs.push_back(*f);
    }
    auto faulty =
        faulty_server_transport::make(
            std::make_unique<memory_server>(), cfg,
            [this](const channel_fault& f) { fired_.push_back(f); },
            [this] { return std::chrono::nanoseconds{static_cast<int64_t>(now_)}; });
    ASSERT_TRUE(faulty.ok()) << faulty.error().to_string();
    seam_ = faulty->get();
    auto ch = scheduler_channel::create(std::move(faulty).value(), world, "token");
    ASSERT_TRUE(ch.ok());
    sched_ = std::move(ch).value();
    auto c = step_coordinator::create({.world_size = world,
                                       .job_timeout = std::chrono::nanoseconds{timeout_ns},
                                       .job_timeout_steps = 0});
    ASSERT_TRUE(c.ok());
    coord_.emplace(std::move(c).value());
    for (rank_id r = 0; r < world; ++r) {
      sched_->rank_up(r, 0);
      coord_->rank_up(r, 0);
      auto t = sched_->transport().connect_local(peer_id(r, 0));
      ASSERT_TRUE(t.ok());
      auto rc = rank_channel::open(std::move(t).value(), {r, 0, "token"});
      ASSERT_TRUE(rc.ok());
      ranks_.push_back(std::move(rc).value());
    }
    pump();
    ASSERT_EQ(sched_->routed_ranks(), world);
  }

  /// Plans step `s` with one store job `s * 10` (none when `with_job` is false); every rank
  /// takes the metadata and reports the job done.
  void run_step(step_id s, bool with_job = true) {
    connector_metadata m;
    m.step = s;
    if (with_job) m.stores.push_back({.id = s * 10, .kind = transfer_kind::store});
    coord_->expect(m, now_);
    sched_->send_step(m);
    for (rank_id r = 0; r < ranks_.size(); ++r) {
      auto got = ranks_[r]->next_step(0ms);
      ASSERT_TRUE(got.ok() && got->has_value()) << "rank " << r << " step " << s;
      step_report rep{r, 0, s, {}};
      for (const auto& j : (*got)->stores) {
        rep.events.push_back({.rank = r,
                              .incarnation = 0,
                              .seq = seq_[r]++,
                              .step = s,
                              .job = j.id,
                              .kind = transfer_kind::store,
                              .ok = true,
                              .bytes = 8});
      }
      ASSERT_TRUE(ranks_[r]->send_report(rep).ok());
    }
    pump();
  }

  /// Hands what arrived to the coordinator and collects its outputs.
  void pump() {
    std::vector<step_report> reports;
    sched_->receive(0ms, reports);
    for (const auto& r : reports) coord_->report(r);
    coord_->tick(now_);
    while (auto out = coord_->poll_output()) {
      for (const auto& j : out->jobs) results_[j.job].push_back(j);
    }
    for (auto& n : sched_->take_notes()) notes_.push_back(std::move(n));
  }

  size_t fired(fault_kind k) const { return seam_->fired()[static_cast<size_t>(k)]; }

  faulty_server_transport* seam_ = nullptr;
  std::unique_ptr<scheduler_channel> sched_;
  std::optional<step_coordinator> coord_;
  std::vector<std::unique_ptr<rank_channel>> ranks_;
  std::map<rank_id, uint64_t> seq_;
  uint64_t now_ = 0;
  std::map<job_id, std::vector<job_result>> results_;  // every result handed out, per job
  std::vector<channel_fault> fired_;
  std::vector<std::string> notes_;
};

TEST_F(FaultySeamTest, ADroppedReportFailsTheJobForThatRankAtTheDeadline) {
  start(2, {"drop_report:rank=1,nth=0"});
  run_step(1);
  ASSERT_EQ(fired(fault_kind::drop_report), 1u);
  ASSERT_EQ(fired_.size(), 1u);
  EXPECT_EQ(fired_[0].rank, 1u);
  EXPECT_EQ(fired_[0].step, 1u);
  EXPECT_EQ(results_.count(10), 0u) << "rank 1 never reported: the job cannot be done";
  now_ = timeout_ns - 1;
  pump();
  EXPECT_EQ(results_.count(10), 0u) << "failed before its deadline";
  now_ = timeout_ns;
  pump();  // rank 1 has not closed step 1: the deadline releases the result anyway
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_FALSE(results_[10][0].ok);
  EXPECT_EQ(results_[10][0].error, errc::timeout);
  EXPECT_EQ(coord_->stats().timed_out, 1u);
  run_step(2);  // the next step's reports come through and complete
  ASSERT_EQ(results_[20].size(), 1u);
  EXPECT_TRUE(results_[20][0].ok);
  EXPECT_EQ(results_[10].size(), 1u);  // still once
}

TEST_F(FaultySeamTest, ALateReportAfterTheDeadlineIsCountedAndDropped) {
  start(2, {"delay_report:rank=1,nth=0,by=2"});
  run_step(1);
  EXPECT_EQ(seam_->held_frames(), 1u);
  now_ = timeout_ns;
  pump();
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_EQ(results_[10][0].error, errc::timeout);
  run_step(2);
  run_step(3);  // releases rank 1's step-1 report: late
  EXPECT_EQ(seam_->held_frames(), 0u);
  EXPECT_EQ(coord_->stats().late, 1u);
  EXPECT_EQ(results_[10].size(), 1u);
  EXPECT_TRUE(results_[20][0].ok);
  EXPECT_TRUE(results_[30][0].ok);
}

TEST_F(FaultySeamTest, AReportDelayedByMsIsHeldUntilItsTime) {
  start(2, {"delay_report:rank=1,nth=0,ms=50"});
  now_ = 1'000'000;
  run_step(1);
  EXPECT_EQ(fired(fault_kind::delay_report), 1u);
  EXPECT_EQ(seam_->held_frames(), 1u);
  EXPECT_TRUE(results_[10].empty());
  now_ += 49'999'999;  // 1 ns short of 50 ms after it arrived
  pump();
  EXPECT_EQ(seam_->held_frames(), 1u);
  EXPECT_TRUE(results_[10].empty());
  now_ += 1;
  pump();
  EXPECT_EQ(seam_->held_frames(), 0u);
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_TRUE(results_[10][0].ok);  // delivered within the deadline: the job completes
  EXPECT_EQ(coord_->stats().late, 0u);
}

TEST_F(FaultySeamTest, AReportDelayedByMsPastTheDeadlineIsLate) {
  start(2, {"delay_report:rank=1,nth=0,ms=2000"});
  run_step(1);
  now_ = timeout_ns;
  pump();
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_EQ(results_[10][0].error, errc::timeout);
  now_ = 2'000'000'000;
  pump();
  EXPECT_EQ(seam_->held_frames(), 0u);
  EXPECT_EQ(coord_->stats().late, 1u);
  EXPECT_EQ(results_[10].size(), 1u);  // failed once, not completed after
}

TEST_F(FaultySeamTest, ADuplicateIsIgnoredAndCounted) {
  start(2, {"duplicate_report:rank=0,nth=0"});
  run_step(1);
  EXPECT_EQ(fired(fault_kind::duplicate_report), 1u);
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_TRUE(results_[10][0].ok);
  EXPECT_EQ(results_[10][0].bytes, 16u);  // each rank's bytes once
  EXPECT_EQ(coord_->stats().duplicates, 1u);
  EXPECT_EQ(coord_->stats().completed, 1u);
}

TEST_F(FaultySeamTest, ACorruptFrameIsRefusedAtDecodeAndTheStepsOtherReportsCount) {
  start(3, {"corrupt_frame:rank=1,nth=0,bits=3"});
  run_step(1);
  EXPECT_EQ(fired(fault_kind::corrupt_frame), 1u);
  EXPECT_EQ(sched_->dropped_frames(), 1u);
  ASSERT_EQ(notes_.size(), 1u);
  EXPECT_NE(notes_[0].find("checksum"), std::string::npos) << notes_[0];
  EXPECT_EQ(coord_->stats().reports, 2u) << "ranks 0 and 2 were counted";
  EXPECT_EQ(coord_->stats().rejected, 0u);
  EXPECT_EQ(results_.count(10), 0u);
  now_ = timeout_ns;
  pump();
  ASSERT_EQ(results_[10].size(), 1u);
  EXPECT_EQ(results_[10][0].error, errc::timeout);
  EXPECT_EQ(results_[10][0].bytes, 16u) << "the two reports that came count";
}

TEST_F(FaultySeamTest, ReorderAndDelayNeverCompleteAJobTwice) {
  start(2,
        {"reorder_reports:rank=0,steps=1-30,p=0.5", "delay_report:rank=1,steps=1-30,p=0.5,by=2"});
  for (step_id s = 1; s <= 30; ++s) run_step(s);
  for (step_id s = 31; s <= 34; ++s) run_step(s, /*with_job=*/false);  // releases what is held
  EXPECT_GT(fired(fault_kind::reorder_reports), 0u);
  EXPECT_GT(fired(fault_kind::delay_report), 0u);
  EXPECT_EQ(seam_->held_frames(), 0u);
  for (step_id s = 1; s <= 30; ++s) {
    ASSERT_EQ(results_[s * 10].size(), 1u) << "job " << s * 10;
    EXPECT_TRUE(results_[s * 10][0].ok) << "job " << s * 10;
  }
  EXPECT_EQ(coord_->stats().completed, 30u);
  EXPECT_EQ(coord_->aggregator().tracked_jobs(), 0u);
  EXPECT_EQ(coord_->aggregator().pending_results(), 0u);
}

TEST_F(FaultySeamTest, WithoutChannelFaultsEveryFramePassesUnchanged) {
  start(2, {"fail_copy:p=1", "kill_rank:rank=0,step=3"});  // not the channel's
  for (step_id s = 1; s <= 5; ++s) run_step(s);
  EXPECT_TRUE(fired_.empty());
  EXPECT_EQ(sched_->dropped_frames(), 0u);
  for (step_id s = 1; s <= 5; ++s) EXPECT_TRUE(results_[s * 10].at(0).ok);
}

TEST(FaultyServerTransportTest, BadArgumentsAreRefused) {
  EXPECT_FALSE(faulty_server_transport::make(nullptr, {}).ok());
  fault_config bad{.seed = 0, .specs = {fault_spec{.probability = 3.0}}};
  EXPECT_FALSE(faulty_server_transport::make(std::make_unique<memory_server>(), bad).ok());
}

}  // namespace
}  // namespace kvc::channel
