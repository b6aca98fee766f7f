// Which transfers the gather kernel copies, and the descriptors it reads (pure; every run).
#include "cuda/gather_plan.hpp"

#include <gtest/gtest.h>

#include <array>
#include <vector>

namespace kvc::cuda {
namespace {

std::vector<copy_op> pages(size_t n, size_t bytes) {
  static std::array<std::byte, 1 << 20> src{}, dst{};
  std::vector<copy_op> ops;
  for (size_t i = 0; i < n; ++i) ops.push_back({src.data() + i * 16, dst.data() + i * 16, bytes});
  return ops;
}

TEST(GatherPlanTest, MemcpyTakesNothingAndKernelTakesEveryNonEmptyTransferWithinTheRing) {
  const gather_limits limits{.max_ops = 8, .auto_max_op_bytes = 1024, .chunk_bytes = 1 << 20};
  EXPECT_FALSE(takes_gather(copy_path::memcpy, pages(4, 64), limits));
  EXPECT_TRUE(takes_gather(copy_path::kernel, pages(1, 1 << 20), limits));  // any size
  EXPECT_TRUE(takes_gather(copy_path::kernel, pages(8, 64), limits));
  EXPECT_FALSE(takes_gather(copy_path::kernel, pages(9, 64), limits)) << "more than a slot holds";
  EXPECT_FALSE(takes_gather(copy_path::kernel, {}, limits));
}

TEST(GatherPlanTest, AutoTakesOnlySeveralSmallPages) {
  const gather_limits limits{.max_ops = 8, .auto_max_op_bytes = 1024};
  EXPECT_TRUE(takes_gather(copy_path::auto_select, pages(2, 1024), limits));
  EXPECT_FALSE(takes_gather(copy_path::auto_select, pages(1, 64), limits)) << "one op: one DMA";
  auto mixed = pages(4, 512);
  mixed[2].bytes = 1025;  // one large block: the DMA engines take the transfer
  EXPECT_FALSE(takes_gather(copy_path::auto_select, mixed, limits));
  EXPECT_FALSE(takes_gather(copy_path::auto_select, pages(9, 64), limits));
}

TEST(GatherPlanTest, DescriptorsAreTheOpsAddressesAndSizesInOrder) {
  const auto ops = pages(3, 100);
  std::array<gather_desc, 3> out{};
  EXPECT_EQ(fill_gather_descs(ops, out, 1024), 3u);
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(out[i], (gather_desc{reinterpret_cast<uint64_t>(ops[i].src),
                                   reinterpret_cast<uint64_t>(ops[i].dst), 100}))
        << i;
  }
  std::array<gather_desc, 2> short_out{};
  EXPECT_EQ(fill_gather_descs(ops, short_out, 1024), 2u);  // never writes past the span
  EXPECT_EQ(short_out[1].bytes, 100u);
}

// A large op is cut into chunks so that many CUDA blocks copy it at once; the chunks cover the
// op exactly, in order, and count against the ring slot's descriptors.
TEST(GatherPlanTest, LargeOpsAreCutIntoChunksThatCoverThemExactly) {
  auto ops = pages(2, 2500);
  ops[1].bytes = 1000;
  EXPECT_EQ(gather_desc_count(ops, 1000), 4u);  // 1000 + 1000 + 500, then 1000
  std::array<gather_desc, 4> out{};
  ASSERT_EQ(fill_gather_descs(ops, out, 1000), 4u);
  const auto src0 = reinterpret_cast<uint64_t>(ops[0].src);
  const auto dst0 = reinterpret_cast<uint64_t>(ops[0].dst);
  EXPECT_EQ(out[0], (gather_desc{src0, dst0, 1000}));
  EXPECT_EQ(out[1], (gather_desc{src0 + 1000, dst0 + 1000, 1000}));
  EXPECT_EQ(out[2], (gather_desc{src0 + 2000, dst0 + 2000, 500}));
  EXPECT_EQ(out[3].bytes, 1000u);
  const gather_limits limits{.max_ops = 3, .auto_max_op_bytes = 1 << 20, .chunk_bytes = 1000};
  EXPECT_FALSE(takes_gather(copy_path::kernel, ops, limits)) << "4 descriptors, 3 fit a slot";
  EXPECT_TRUE(takes_gather(copy_path::kernel, pages(1, 3000), limits));
}

TEST(GatherPlanTest, PathNamesRoundTripAndOthersAreOneClearError) {
  for (copy_path p : {copy_path::memcpy, copy_path::kernel, copy_path::auto_select}) {
    auto back = parse_copy_path(to_string(p));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, p);
  }
  auto bad = parse_copy_path("gather");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::invalid_argument);
  EXPECT_EQ(bad.error().message(), "copy path \"gather\": expected memcpy, kernel or auto");
}

}  // namespace
}  // namespace kvc::cuda
