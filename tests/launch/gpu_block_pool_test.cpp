#include "launch/engines/sim/gpu_block_pool.hpp"

#include <gtest/gtest.h>

namespace kvc::sim {
namespace {

using blocks = std::vector<gpu_block>;

TEST(GpuBlockPoolTest, NullBlockIsNeverHandedOut) {
  gpu_block_pool pool{4};
  EXPECT_EQ(pool.num_free(), 3u);
  EXPECT_EQ(pool.allocate(3), (blocks{1, 2, 3}));
  EXPECT_FALSE(pool.allocate(1).has_value());
  pool.free(blocks{0, 2});  // the null block is ignored
  EXPECT_EQ(pool.num_free(), 1u);
}

TEST(GpuBlockPoolTest, FreeAppendsTailFirstAndAllocateTakesLeastRecent) {
  gpu_block_pool pool{6};
  auto a = *pool.allocate(2);  // 1, 2
  auto b = *pool.allocate(2);  // 3, 4
  pool.free(a);                // queue: 5, 2, 1
  pool.free(b);                // queue: 5, 2, 1, 4, 3
  EXPECT_EQ(pool.allocate(5), (blocks{5, 2, 1, 4, 3}));
}

TEST(GpuBlockPoolTest, CachedPrefixIsRevivedUntilItsBlockIsReused) {
  gpu_block_pool pool{4};
  const std::vector<block_key> h{block_key::from_index(1), block_key::from_index(2),
                                 block_key::from_index(3)};
  auto a = *pool.allocate(2);  // 1, 2
  pool.cache(a[0], h[0]);
  pool.cache(a[1], h[1]);
  EXPECT_EQ(pool.cached_prefix(h, 3), (blocks{1, 2}));
  EXPECT_EQ(pool.cached_prefix(h, 1), (blocks{1}));
  pool.free(a);  // queue: 3, 2, 1
  EXPECT_EQ(pool.cached_prefix(h, 3), (blocks{1, 2}));
  pool.take(blocks{1});  // revived: ref 1, leaves the queue
  EXPECT_EQ(pool.ref_count(1), 1u);
  EXPECT_EQ(pool.num_free(), 2u);
  EXPECT_EQ(pool.allocate(2), (blocks{3, 2}));  // 2 is reused: its hash is gone
  EXPECT_FALSE(pool.is_cached(2));
  EXPECT_EQ(pool.cached_prefix(h, 3), (blocks{1}));
  // A second block with a known hash stays anonymous.
  pool.cache(3, h[0]);
  EXPECT_FALSE(pool.is_cached(3));
  pool.reset_prefix_cache();
  EXPECT_TRUE(pool.cached_prefix(h, 3).empty());
}

TEST(GpuBlockPoolTest, SharedBlocksAreFreedByTheirLastUser) {
  gpu_block_pool pool{3};
  auto a = *pool.allocate(1);
  pool.take(a);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 1u);
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 2u);
}

}  // namespace
}  // namespace kvc::sim
