// The launch's figures computed from the processes' lines: the connector share takes each
// step's slowest rank (ranks run a step in parallel).
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

}  // namespace
}  // namespace kvc::sim
