// pin_chunk_plan: chunks hold whole slots, end on page boundaries, stay under the limit, cover
// the region exactly. The first cases take a 1-byte page to look at slots alone.
#include "cuda/pin_chunk_plan.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::cuda {
namespace {

TEST(PinChunkPlanTest, ChunksHoldWholeSlotsAndTheLastIsPartial) {
  // 10 slots of 300 B, chunks of at most 1000 B: 3 slots (900 B) per chunk, 1 slot left.
  auto plan = plan_pin_chunks(3000, 300, 1000, 1);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(*plan, (std::vector<pin_chunk>{{0, 900}, {900, 900}, {1800, 900}, {2700, 300}}));
}

TEST(PinChunkPlanTest, NoSlotStraddlesTwoChunks) {
  for (size_t stride : {1u, 7u, 64u, 333u, 1000u}) {
    for (size_t region : {stride, 5 * stride, 17 * stride + stride / 2 + 1}) {
      auto plan = plan_pin_chunks(region, stride, 1000, 1);
      ASSERT_TRUE(plan.ok()) << plan.error().to_string();
      size_t next = 0;
      for (const pin_chunk& c : *plan) {
        EXPECT_EQ(c.offset, next) << "a gap or an overlap";
        EXPECT_EQ(c.offset % stride, 0u) << "chunk starts inside a slot";
        EXPECT_LE(c.bytes, 1000u);
        EXPECT_GT(c.bytes, 0u);
        next = c.offset + c.bytes;
      }
      EXPECT_EQ(next, region) << "stride " << stride << " region " << region;
    }
  }
}

TEST(PinChunkPlanTest, ExactFitsAndSingleChunks) {
  EXPECT_EQ(*plan_pin_chunks(2000, 500, 1000, 1), (std::vector<pin_chunk>{{0, 1000}, {1000, 1000}}));
  EXPECT_EQ(*plan_pin_chunks(700, 700, 1000), (std::vector<pin_chunk>{{0, 700}}));
  EXPECT_EQ(*plan_pin_chunks(1000, 1000, 1000), (std::vector<pin_chunk>{{0, 1000}}));
  // A trailing partial slot stays in the chunk its start falls in.
  EXPECT_EQ(*plan_pin_chunks(1150, 300, 1000, 1), (std::vector<pin_chunk>{{0, 900}, {900, 250}}));
}

TEST(PinChunkPlanTest, SlotLargerThanAChunkIsAnError) {
  auto plan = plan_pin_chunks(4096, 2048, 1024);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.code(), errc::invalid_argument);
  EXPECT_NE(plan.error().message().find("2048"), std::string::npos) << plan.error().message();
  EXPECT_EQ(plan_pin_chunks(0, 64, 1024).code(), errc::invalid_argument);
  EXPECT_EQ(plan_pin_chunks(4096, 0, 1024).code(), errc::invalid_argument);
  EXPECT_EQ(plan_pin_chunks(4096, 64, 0).code(), errc::invalid_argument);
}

// A slot stride that is not a page multiple: two chunks must not share a page, so boundaries
// fall where a slot and a page both end (lcm of the two), never inside a page.
TEST(PinChunkPlanTest, ChunkBoundariesFallOnPageBoundaries) {
  constexpr size_t page = 4096;
  for (size_t stride : {size_t{1000}, size_t{6144}, size_t{4096 + 512}, size_t{3 * 4096}}) {
    const size_t region = 5000 * stride + stride / 3;
    auto plan = plan_pin_chunks(region, stride, 64 * page * 4, page);
    ASSERT_TRUE(plan.ok()) << stride << ": " << plan.error().to_string();
    ASSERT_GT(plan->size(), 1u) << stride;
    size_t next = 0;
    for (const pin_chunk& c : *plan) {
      EXPECT_EQ(c.offset, next);
      EXPECT_EQ(c.offset % page, 0u) << "stride " << stride << ": chunk starts inside a page";
      EXPECT_EQ(c.offset % stride, 0u) << "stride " << stride << ": chunk starts inside a slot";
      EXPECT_LE(c.bytes, 64 * page * 4);
      next = c.offset + c.bytes;
    }
    EXPECT_EQ(next, region);
  }
  // 1000-byte slots: a chunk boundary needs lcm(1000, 4096) = 512,000 bytes.
  EXPECT_EQ((*plan_pin_chunks(2'000'000, 1000, 1'100'000, page))[0].bytes, 1'024'000u);
}

TEST(PinChunkPlanTest, BoundariesThatCannotFitTheLimitAreAnErrorUnlessOneChunkHoldsAll) {
  // lcm(1000, 4096) = 512,000 > 100,000: no boundary fits; one chunk for a region that fits.
  auto refused = plan_pin_chunks(200'000, 1000, 100'000, 4096);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), errc::invalid_argument);
  EXPECT_NE(refused.error().message().find("page"), std::string::npos)
      << refused.error().message();
  EXPECT_EQ(*plan_pin_chunks(99'000, 1000, 100'000, 4096), (std::vector<pin_chunk>{{0, 99'000}}));
  EXPECT_EQ(plan_pin_chunks(4096, 64, 1024, 0).code(), errc::invalid_argument);
}

TEST(PinChunkPlanTest, HugeRegionsAt64GiB) {
  constexpr size_t gib = size_t{1} << 30;
  // 200 GiB of 3 MiB slots: 64 GiB is not a multiple of 3 MiB, so chunks stop at a slot edge.
  constexpr size_t stride = 3 << 20;
  auto plan = plan_pin_chunks(200 * gib, stride, 64 * gib);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 4u);
  EXPECT_EQ((*plan)[0].bytes, 64 * gib / stride * stride);
  EXPECT_LT((*plan)[0].bytes, 64 * gib);
  EXPECT_EQ((*plan)[3].offset + (*plan)[3].bytes, 200 * gib);
}

}  // namespace
}  // namespace kvc::cuda
