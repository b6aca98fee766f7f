#include "launch/supervisor/process_faults.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "launch/config/fault_options.hpp"

namespace kvc::launch {
namespace {

fault_config faults(std::vector<std::string> specs) {
  auto c = parse_fault_options(specs, 7);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? c.value() : fault_config{};
}

const std::vector<rank_id> four{0, 1, 2, 3};

TEST(ProcessFaultsTest, FiresEachSpecOnceAtItsStepInSpecOrder) {
  auto s = process_fault_schedule::create(
      faults({"kill_rank:rank=2,step=5", "drop_report:p=0.5", "hang_rank:rank=1,step=3,resume=200",
              "kill_scheduler:step=5"}),
      four);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->empty());
  EXPECT_TRUE(s->due(2).empty());
  const auto at3 = s->due(3);
  ASSERT_EQ(at3.size(), 1u);
  EXPECT_EQ(at3[0].action, process_action::what::stop_rank);
  EXPECT_EQ(at3[0].rank, 1u);
  EXPECT_EQ(at3[0].resume_ms, std::optional<uint64_t>{200});
  EXPECT_EQ(at3[0].spec, 2u);
  EXPECT_EQ(kind_of(at3[0]), fault_kind::hang_rank);
  EXPECT_TRUE(s->due(3).empty());  // once
  EXPECT_TRUE(s->due(4).empty());
  const auto at5 = s->due(5);
  ASSERT_EQ(at5.size(), 2u);
  EXPECT_EQ(at5[0].action, process_action::what::kill_rank);
  EXPECT_EQ(at5[0].rank, 2u);
  EXPECT_EQ(kind_of(at5[0]), fault_kind::kill_rank);
  EXPECT_EQ(at5[1].action, process_action::what::kill_scheduler);
  EXPECT_EQ(kind_of(at5[1]), fault_kind::kill_scheduler);
  EXPECT_TRUE(s->done());
  EXPECT_TRUE(s->due(100).empty());
}

TEST(ProcessFaultsTest, ASkippedStepFiresWhatWasDueUpToIt) {
  // Progress lines may skip steps (a restart pauses the run): the next one catches up.
  auto s = process_fault_schedule::create(
      faults({"kill_rank:rank=0,step=2", "kill_rank:rank=0,step=4"}), four);
  ASSERT_TRUE(s.ok());
  const auto due = s->due(9);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].step, 2u);
  EXPECT_EQ(due[1].step, 4u);
}

TEST(ProcessFaultsTest, HangWithoutResumeIsNeverContinued) {
  auto s = process_fault_schedule::create(faults({"hang_rank:rank=3,step=1"}), four);
  ASSERT_TRUE(s.ok());
  const auto due = s->due(1);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_FALSE(due[0].resume_ms.has_value());
}

TEST(ProcessFaultsTest, TheSameSpecsGiveTheSameActions) {
  const auto c =
      faults({"kill_rank:rank=2,step=4", "hang_rank:rank=1,step=4", "kill_scheduler:step=9"});
  auto a = process_fault_schedule::create(c, four);
  auto b = process_fault_schedule::create(c, four);
  ASSERT_TRUE(a.ok() && b.ok());
  for (step_id k = 0; k < 12; ++k) EXPECT_EQ(a->due(k), b->due(k));
}

TEST(ProcessFaultsTest, OnlyChannelAndCopyFaultsIsEmpty) {
  auto s = process_fault_schedule::create(faults({"drop_report:p=0.1", "fail_copy:nth=2"}), four);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
  EXPECT_TRUE(s->done());
  EXPECT_TRUE(s->due(1000).empty());
}

TEST(ProcessFaultsTest, ARankOfAnotherNodeIsRefused) {
  const std::vector<rank_id> node0{0, 1};
  auto s = process_fault_schedule::create(faults({"kill_rank:rank=3,step=2"}), node0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().code(), errc::invalid_argument);
  EXPECT_NE(s.error().message().find("rank 3 is not on node 0"), std::string::npos)
      << s.error().message();
}

}  // namespace
}  // namespace kvc::launch
