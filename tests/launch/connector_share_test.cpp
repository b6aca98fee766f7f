// The launch's figures computed from the processes' lines: the connector share takes each
// step's slowest rank (ranks run a step in parallel), folded as the ranks' batches arrive in a
// memory that follows their lag and not the run's length.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "launch/supervisor/slowest_rank_sum.hpp"

namespace kvc::launch {
namespace {

TEST(ConnectorShareTest, EachStepCountsItsSlowestRankOnce) {
  // Step 1: rank 1 is slower; step 2: rank 0; step 3 only rank 0 ran it (a rank that joined late).
  slowest_rank_sum sum({0, 1});
  for (auto [step, ns] : {std::pair{1, 100}, {2, 700}, {3, 50}}) sum.add(0, step, ns);
  for (auto [step, ns] : {std::pair{1, 300}, {2, 200}}) sum.add(1, step, ns);
  sum.finish();
  EXPECT_DOUBLE_EQ(sum.total_ns(), 300 + 700 + 50);
  // (scheduler 1950 ns + 1050 ns) over 1 us of simulated time.
  EXPECT_DOUBLE_EQ(launch_connector_share(1950, sum.total_ns(), 1e-6), 3.0);
  EXPECT_DOUBLE_EQ(launch_connector_share(1950, sum.total_ns(), 0), 0.0);
  EXPECT_DOUBLE_EQ(launch_connector_share(0, 0, 1.0), 0.0);
}

// Issue 23: every worker's runner line carried every step's time (5.7 MB at 400,000 steps, the
// launcher's memory growing with them). Now batches arrive as the run goes and a step is folded
// once every rank has sent a step at or past it.
TEST(ConnectorShareTest, StepsAreFoldedOnceEveryRankPassedThemSoMemoryFollowsTheLagOnly) {
  slowest_rank_sum sum({0, 1, 2});
  constexpr uint64_t steps = 400'000;
  constexpr uint64_t batch = 1024;
  double want = 0;
  size_t most_open = 0;
  for (uint64_t first = 1; first <= steps; first += batch) {
    const uint64_t last = std::min(steps, first + batch - 1);
    for (rank_id r = 0; r < 3; ++r) {  // rank by rank, one batch each
      for (uint64_t s = first; s <= last; ++s) sum.add(r, s, (s * 7 + r * 13) % 1000);
      most_open = std::max(most_open, sum.open_steps());
    }
    for (uint64_t s = first; s <= last; ++s) {
      uint64_t slowest = 0;
      for (rank_id r = 0; r < 3; ++r) slowest = std::max(slowest, (s * 7 + r * 13) % 1000);
      want += static_cast<double>(slowest);
    }
  }
  EXPECT_LE(most_open, batch);  // one batch waits for the other ranks, never the run
  EXPECT_EQ(sum.open_steps(), 0u);
  sum.finish();
  EXPECT_DOUBLE_EQ(sum.total_ns(), want);
}

TEST(ConnectorShareTest, ARankThatJoinedLateOrStoppedHoldsNoStepForever) {
  slowest_rank_sum sum({0, 1});
  sum.add(0, 1, 10);
  sum.add(0, 2, 10);
  EXPECT_EQ(sum.open_steps(), 2u);  // rank 1 has sent nothing yet
  sum.add(1, 2, 30);  // rank 1 (restarted) ran step 2 only: step 1 is rank 0's alone
  EXPECT_EQ(sum.open_steps(), 0u);
  EXPECT_DOUBLE_EQ(sum.total_ns(), 10 + 30);
  sum.add(1, 2, 99);  // a step already folded is not counted again
  sum.add(7, 3, 99);  // nor a rank of another node
  sum.add(0, 3, 5);   // rank 1 stopped sending: step 3 waits until the run ends
  EXPECT_EQ(sum.open_steps(), 1u);
  sum.finish();
  EXPECT_DOUBLE_EQ(sum.total_ns(), 10 + 30 + 5);
}

}  // namespace
}  // namespace kvc::launch
