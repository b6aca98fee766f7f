// bench_stats: nearest-rank percentiles, the latency summary and ratios, with their errors.
#include "cuda/bench_stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace kvc::cuda {
namespace {

TEST(BenchStatsTest, PercentileIsNearestRankOfUnsortedSamples) {
  const std::vector<double> v{5, 1, 4, 2, 3};
  EXPECT_EQ(*percentile(v, 0.0), 1);
  EXPECT_EQ(*percentile(v, 0.2), 1);
  EXPECT_EQ(*percentile(v, 0.21), 2);
  EXPECT_EQ(*percentile(v, 0.5), 3);
  EXPECT_EQ(*percentile(v, 1.0), 5);
  const std::vector<double> even{10, 40, 20, 30};
  EXPECT_EQ(*percentile(even, 0.5), 20) << "the lower middle sample, not an interpolation";
}

TEST(BenchStatsTest, P99OfAHundredSamplesIsTheSecondLargest) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  auto s = summarize_latency(v);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->p50, 50);
  EXPECT_EQ(s->p99, 99);
  EXPECT_EQ(s->samples, 100u);
  const std::vector<double> one{7.5};
  EXPECT_EQ(summarize_latency(one)->p99, 7.5);
}

TEST(BenchStatsTest, BadInputIsRefused) {
  const std::vector<double> none;
  EXPECT_EQ(percentile(none, 0.5).code(), errc::invalid_argument);
  EXPECT_EQ(summarize_latency(none).code(), errc::invalid_argument);
  const std::vector<double> v{1, 2};
  EXPECT_EQ(percentile(v, -0.1).code(), errc::invalid_argument);
  EXPECT_EQ(percentile(v, 1.5).code(), errc::invalid_argument);
  EXPECT_EQ(percentile(v, std::nan("")).code(), errc::invalid_argument);
}

TEST(BenchStatsTest, RatioNeedsAPositiveBaseline) {
  EXPECT_DOUBLE_EQ(*ratio(45.0, 50.0), 0.9);
  EXPECT_EQ(ratio(1.0, 0.0).code(), errc::invalid_argument);
  EXPECT_EQ(ratio(1.0, -2.0).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::cuda
