#include "shm/pool_geometry.hpp"

#include <gtest/gtest.h>

#include <limits>

#include "shm/segment.hpp"
#include "shm/segment_header.hpp"

namespace kvc::shm {
namespace {

TEST(PoolGeometryTest, SlotStrideRoundsUpToFourKiB) {
  EXPECT_EQ((pool_geometry{1, 1, 1}.slot_stride()), 4096u);
  EXPECT_EQ((pool_geometry{1, 1, 4096}.slot_stride()), 4096u);
  EXPECT_EQ((pool_geometry{1, 1, 4097}.slot_stride()), 8192u);
  EXPECT_EQ((pool_geometry{1, 1, 256 * 1024}.slot_stride()), 256u * 1024);
}

TEST(PoolGeometryTest, SegmentBytesAreHeaderRegionPlusAllRankRegions) {
  const pool_geometry g{4, 10, 5000};
  EXPECT_EQ(g.rank_bytes(), 10u * 8192);
  EXPECT_EQ(g.pool_bytes(), 4u * 10 * 8192);
  EXPECT_EQ(g.segment_bytes(), (2u << 20) + 4u * 10 * 8192);
}

TEST(SizePoolTest, CpuBytesAreATotalOverAllRanks) {
  // vLLM: num_cpu_blocks = cpu_bytes_to_use // (bytes_per_block * world_size)
  auto g = size_pool(uint64_t{8} << 30, 4, uint64_t{2} << 20);
  ASSERT_TRUE(g.ok()) << g.error().to_string();
  EXPECT_EQ(g->world_size, 4u);
  EXPECT_EQ(g->num_slots, 1024u);
  EXPECT_EQ(g->slot_bytes, uint64_t{2} << 20);
  EXPECT_EQ(g->pool_bytes(), uint64_t{8} << 30);  // no over-allocation at 4 KiB-multiple blocks
}

TEST(SizePoolTest, RoundsDownToWholeBlocks) {
  auto g = size_pool(3 * 1000 * 2 - 1, 2, 1000);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->num_slots, 2u);
}

TEST(SizePoolTest, BudgetBelowOneBlockAcrossRanksIsAnError) {
  auto g = size_pool(2 * 4096 - 1, 2, 4096);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.code(), errc::invalid_argument);
  EXPECT_NE(g.error().message().find("holds no block"), std::string::npos);
  EXPECT_TRUE(size_pool(2 * 4096, 2, 4096).ok());
  EXPECT_EQ(size_pool(0, 1, 4096).code(), errc::invalid_argument);
}

TEST(SizePoolTest, ZeroWorldSizeOrBlockSizeIsAnError) {
  EXPECT_EQ(size_pool(1 << 20, 0, 4096).code(), errc::invalid_argument);
  EXPECT_EQ(size_pool(1 << 20, 1, 0).code(), errc::invalid_argument);
}

TEST(SizePoolTest, SlotCountBeyondThirtyTwoBitsIsAnError) {
  const uint64_t slots = uint64_t{std::numeric_limits<uint32_t>::max()} + 1;
  EXPECT_EQ(size_pool(slots, 1, 1).code(), errc::invalid_argument);
  auto max = size_pool(slots - 1, 1, 1);
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(max->num_slots, std::numeric_limits<uint32_t>::max());
}

TEST(SizePoolTest, OverflowingProductsAreErrors) {
  const uint64_t huge = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(size_pool(huge, 4, huge / 2).code(), errc::invalid_argument);
  EXPECT_EQ(validate(pool_geometry{2, std::numeric_limits<uint32_t>::max(), huge / 4}).code(),
            errc::invalid_argument);
  EXPECT_EQ(validate(pool_geometry{1, 1, huge}).code(), errc::invalid_argument);
  EXPECT_TRUE(validate(pool_geometry{1, 1, 1}).ok());
}

TEST(LayoutChecksumTest, ChangesWithEveryGeometryField) {
  const pool_geometry g{2, 8, 65536};
  const uint64_t base = layout_checksum(g);
  EXPECT_EQ(base, layout_checksum(pool_geometry{2, 8, 65536}));
  EXPECT_NE(base, layout_checksum(pool_geometry{3, 8, 65536}));
  EXPECT_NE(base, layout_checksum(pool_geometry{2, 9, 65536}));
  EXPECT_NE(base, layout_checksum(pool_geometry{2, 8, 65537}));
  EXPECT_NE(base, layout_checksum(segment_layout_version + 1, 2, 8, 65536, 65536, pool_offset,
                                  g.segment_bytes()));
}

TEST(SegmentNameTest, IsUniquePerUserInstanceAndNode) {
  EXPECT_EQ(segment_name(1000, "run7", 0), "/kvc-1000-run7-node0");
  EXPECT_EQ(segment_name(0, "a", 12), "/kvc-0-a-node12");
  EXPECT_NE(segment_name(1000, "run7", 0), segment_name(1001, "run7", 0));
  EXPECT_NE(segment_name(1000, "run7", 0), segment_name(1000, "run8", 0));
  EXPECT_NE(segment_name(1000, "run7", 0), segment_name(1000, "run7", 1));
}

}  // namespace
}  // namespace kvc::shm
