// The launch's figures computed from the processes' lines: the connector share takes each
// step's slowest rank (ranks run a step in parallel), and a comparison of two summary lines has
// soak's keys and ratios.
#include <gtest/gtest.h>

#include "launch/sim_engine/run_report.hpp"

namespace kvc::sim {
namespace {

TEST(ConnectorShareTest, EachStepCountsItsSlowestRankOnce) {
  // Step 1: rank 1 is slower; step 2: rank 0; step 3 only rank 0 ran it (a rank that joined late).
  const std::vector<step_times> ranks{{{1, 100}, {2, 700}, {3, 50}}, {{1, 300}, {2, 200}}};
  EXPECT_DOUBLE_EQ(slowest_rank_ns(ranks), 300 + 700 + 50);
  // (scheduler 1950 ns + 1050 ns) over 1 us of simulated time.
  EXPECT_DOUBLE_EQ(launch_connector_share(1950, ranks, 1e-6), 3.0);
  EXPECT_DOUBLE_EQ(launch_connector_share(1950, ranks, 0), 0.0);
  EXPECT_DOUBLE_EQ(launch_connector_share(0, {}, 1.0), 0.0);
}

TEST(ConnectorShareTest, ACompareOfSummaryLinesHasSoaksKeysAndRatios) {
  run_report on;
  on.prefill_tokens_computed = 600;
  on.ttft_p50_ms = 100;
  on.output_tokens_per_s = 300;
  on.sim_seconds = 2;
  run_report off = on;
  off.offload = false;
  off.prefill_tokens_computed = 1000;
  off.ttft_p50_ms = 150;
  off.output_tokens_per_s = 250;
  off.sim_seconds = 3;
  const auto from_reports = compare_json(on, off);
  const auto from_lines = compare_json(summary_json(on), summary_json(off));
  EXPECT_EQ(from_reports, from_lines);
  EXPECT_EQ(from_lines.at("event"), "compare");
  EXPECT_EQ(from_lines.at("prefill_tokens_saved"), 400);
  EXPECT_DOUBLE_EQ(from_lines.at("ttft_p50_ratio").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(from_lines.at("throughput_ratio").get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(from_lines.at("sim_time_ratio").get<double>(), 1.5);
  EXPECT_EQ(from_lines.at("offload_off").at("offload"), false);
  // A line without the figures (a failed run's) gives ratios of 0, not a division by zero.
  const auto empty = compare_json(nlohmann::json{{"event", "summary"}}, summary_json(off));
  EXPECT_EQ(empty.at("ttft_p50_ratio"), 0.0);
  EXPECT_EQ(empty.at("prefill_tokens_saved"), 1000);
}

}  // namespace
}  // namespace kvc::sim
