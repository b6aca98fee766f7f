// What a launch keeps of its children's lines (launch/supervisor/child_reports.hpp): the fault
// report is the scheduler's with the workers' copy faults and the launcher's process faults added,
// and after kill_scheduler it says whether the workers ended on their own.
#include "launch/supervisor/child_reports.hpp"

#include <gtest/gtest.h>

namespace kvc::launch {
namespace {

using nlohmann::json;

constexpr size_t kind(fault_kind k) { return static_cast<size_t>(k); }

TEST(ChildReportsTest, TheFaultReportAddsTheWorkersAndTheLaunchersFaults) {
  child_reports said({0, 1});
  EXPECT_FALSE(said.fault_report({}).has_value());  // no faults, no report
  fault_outcome scheduler{.seed = 5, .jobs_failed = 2};
  scheduler.fired[kind(fault_kind::drop_report)] = 3;
  said.add(fault_report_event{scheduler});
  said.add_worker_fired({{"fail_copy", 1}});
  said.add_worker_fired({{"fail_copy", 2}, {"delay_copy", 0}});
  process_fault_tally process{.scheduled = true, .seed = 5};
  process.fired[kind(fault_kind::kill_rank)] = 1;
  auto report = said.fault_report(process);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ((*report)["fired"]["drop_report"], 3);
  EXPECT_EQ((*report)["fired"]["fail_copy"], 3);
  EXPECT_EQ((*report)["fired"]["kill_rank"], 1);
  EXPECT_EQ((*report)["jobs_failed"], 2);
  EXPECT_TRUE((*report)["invariants_ok"].get<bool>());
  EXPECT_FALSE(report->contains("workers_exited_on_their_own"));
}

TEST(ChildReportsTest, AKilledSchedulerLeavesTheLaunchersCountsAndTheWorkersInvariant) {
  child_reports said({0});
  process_fault_tally process{.scheduled = true, .seed = 9, .scheduler_killed = true};
  process.fired[kind(fault_kind::kill_scheduler)] = 1;
  auto report = said.fault_report(process);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ((*report)["seed"], 9);
  EXPECT_EQ((*report)["fired"]["kill_scheduler"], 1);
  EXPECT_TRUE((*report)["workers_exited_on_their_own"].get<bool>());
  EXPECT_TRUE((*report)["invariants_ok"].get<bool>());
  process.workers_killed = true;
  report = said.fault_report(process);
  EXPECT_FALSE((*report)["workers_exited_on_their_own"].get<bool>());
  EXPECT_FALSE((*report)["invariants_ok"].get<bool>());
}

TEST(ChildReportsTest, TheWorkersLinesAreKeptForTheSummary) {
  child_reports said({0, 1});
  said.add(runner_event{.rank = 0, .steps = 4, .loads_verified = 2});
  said.add(connector_steps_event{0, {{1, 100}, {2, 300}}});
  said.add(connector_steps_event{1, {{1, 200}, {2, 50}}});
  said.add(smoke_event{.steps = 3, .jobs_ok = 3});
  ASSERT_EQ(said.runners().size(), 1u);
  EXPECT_EQ(said.runners()[0]["loads_verified"], 2);
  EXPECT_EQ(said.rank_connector_ns(), 200.0 + 300.0);  // each step's slowest rank
  ASSERT_TRUE(said.smoke().has_value());
  EXPECT_EQ((*said.smoke())["jobs_ok"], 3);
  EXPECT_FALSE(said.sim().has_value());
}

}  // namespace
}  // namespace kvc::launch
