#include "cuda/copy_bench_stats.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::cuda {
namespace {

TEST(CopyBenchStats, PercentileIsNearestRank) {
  const std::vector<double> v{5, 1, 4, 2, 3, 10, 9, 8, 7, 6};
  EXPECT_EQ(*percentile(v, 50), 5);
  EXPECT_EQ(*percentile(v, 99), 10);
  EXPECT_EQ(*percentile(v, 0), 1);
  EXPECT_EQ(*percentile(v, 100), 10);
  EXPECT_EQ(*percentile(std::vector<double>{42}, 99), 42);
}

TEST(CopyBenchStats, PercentileRefusesBadInput) {
  EXPECT_EQ(percentile(std::vector<double>{}, 50).code(), errc::invalid_argument);
  EXPECT_EQ(percentile(std::vector<double>{1}, 101).code(), errc::invalid_argument);
  EXPECT_EQ(percentile(std::vector<double>{1}, -1).code(), errc::invalid_argument);
}

TEST(CopyBenchStats, ThroughputAndRatio) {
  EXPECT_DOUBLE_EQ(gbps(2'000'000'000, 0.5), 4.0);
  EXPECT_EQ(gbps(1, 0), 0.0);
  EXPECT_DOUBLE_EQ(ratio_to_ceiling(18, 20), 0.9);
  EXPECT_EQ(ratio_to_ceiling(18, 0), 0.0);
}

TEST(CopyBenchStats, ShapesCoverSmallPagesAndWholeBlocks) {
  auto s = vllm_like_shapes(64ull << 20, 64);
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].page_bytes, 16u << 10);
  EXPECT_EQ((*s)[0].regions, 64u);
  EXPECT_EQ((*s)[0].blocks, 64u);
  EXPECT_EQ((*s)[0].bytes(), 64ull << 20);
  EXPECT_EQ((*s)[0].label, "64x64x16KiB");
  EXPECT_EQ((*s)[2].page_bytes, 64u << 10);
  EXPECT_EQ((*s)[3].page_bytes, 2u << 20);
  EXPECT_EQ((*s)[3].ops(), 32u);
  EXPECT_EQ((*s)[3].label, "1x32x2MiB");
}

TEST(CopyBenchStats, ShapesRefuseATooSmallSet) {
  EXPECT_EQ(vllm_like_shapes(1 << 20, 1).code(), errc::invalid_argument);
  EXPECT_EQ(vllm_like_shapes(4 << 20, 0).code(), errc::invalid_argument);
  EXPECT_EQ(vllm_like_shapes(4 << 20, 128).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::cuda
