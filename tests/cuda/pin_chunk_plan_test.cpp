// pin_chunk_plan: chunks hold whole slots, stay under the limit, cover the region exactly.
#include "cuda/pin_chunk_plan.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::cuda {
namespace {

TEST(PinChunkPlanTest, ChunksHoldWholeSlotsAndTheLastIsPartial) {
  // 10 slots of 300 B, chunks of at most 1000 B: 3 slots (900 B) per chunk, 1 slot left.
  auto plan = plan_pin_chunks(3000, 300, 1000);
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(*plan, (std::vector<pin_chunk>{{0, 900}, {900, 900}, {1800, 900}, {2700, 300}}));
}

TEST(PinChunkPlanTest, NoSlotStraddlesTwoChunks) {
  for (size_t stride : {1u, 7u, 64u, 333u, 1000u}) {
    for (size_t region : {stride, 5 * stride, 17 * stride + stride / 2 + 1}) {
      auto plan = plan_pin_chunks(region, stride, 1000);
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
  EXPECT_EQ(*plan_pin_chunks(2000, 500, 1000), (std::vector<pin_chunk>{{0, 1000}, {1000, 1000}}));
  EXPECT_EQ(*plan_pin_chunks(700, 700, 1000), (std::vector<pin_chunk>{{0, 700}}));
  EXPECT_EQ(*plan_pin_chunks(1000, 1000, 1000), (std::vector<pin_chunk>{{0, 1000}}));
  // A trailing partial slot stays in the chunk its start falls in.
  EXPECT_EQ(*plan_pin_chunks(1150, 300, 1000), (std::vector<pin_chunk>{{0, 900}, {900, 250}}));
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
