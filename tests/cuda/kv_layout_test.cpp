// kv_layout: canonicalisation of every KV tensor layout vLLM registers, its errors, and the op
// builder (packing, skip of partial first blocks, merging, errors). Pure: fake addresses only.
#include "cuda/kv_layout.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvc::cuda {
namespace {

constexpr uintptr_t k_base = 0x10000000;

/// Row-major strides in bytes.
std::vector<int64_t> dense(const std::vector<int64_t>& shape, int64_t elem) {
  std::vector<int64_t> s(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = elem;
    elem *= shape[i];
  }
  return s;
}

kv_tensor_desc tensor(uintptr_t base, std::vector<int64_t> shape, int64_t elem, int block_dim) {
  auto strides = dense(shape, elem);
  return {base, std::move(shape), std::move(strides), static_cast<uint64_t>(elem), block_dim};
}

result<kv_layout> layout_of(std::vector<kv_tensor_desc> ts) {
  return kv_layout::from_tensors(ts);
}

TEST(KvLayoutTest, PerLayerTensorIsOneRegion) {
  // (num_blocks=8, block_size=4, heads=2, head_dim=8) fp16: a 128-byte page per block.
  auto l = layout_of({tensor(k_base, {8, 4, 2, 8}, 2, 0)});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->regions().size(), 1u);
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 128, 128}));
  EXPECT_EQ(l->num_blocks(), 8u);
  EXPECT_EQ(l->gpu_block_bytes(), 128u);
  EXPECT_EQ(l->bytes_per_slot(3), 384u);
}

TEST(KvLayoutTest, FlashAttentionSplitsKAndV) {
  // (2, num_blocks=8, 4, 2, 8) fp16: K and V are separate regions, 8 * 128 bytes apart.
  auto l = layout_of({tensor(k_base, {2, 8, 4, 2, 8}, 2, 1)});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->regions().size(), 2u);
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 128, 128}));
  EXPECT_EQ(l->regions()[1], (kv_region{k_base + 1024, 128, 128}));
  EXPECT_EQ(l->region_offset(1), 128u);
  EXPECT_EQ(l->gpu_block_bytes(), 256u);
}

TEST(KvLayoutTest, FlashInferKeepsKAndVInsideTheBlock) {
  auto l = layout_of({tensor(k_base, {8, 2, 4, 2, 8}, 2, 0)});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->regions().size(), 1u);
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 256, 256}));
}

TEST(KvLayoutTest, CrossLayerTensorIsOneRegion) {
  // (num_blocks=8, layers=4 * page 256) as one flat int8 tensor.
  auto l = layout_of({tensor(k_base, {8, 4 * 256}, 1, 0)});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->regions().size(), 1u);
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 1024, 1024}));
}

TEST(KvLayoutTest, PerLayerViewsOfOneCrossLayerTensorMerge) {
  // Layer l is a view at base + l * 256 with block stride 4 * 256: one merged 1024-byte page.
  std::vector<kv_tensor_desc> ts;
  for (int layer = 0; layer < 4; ++layer) {
    ts.push_back({k_base + layer * 256, {8, 128}, {1024, 2}, 2, 0});
  }
  auto l = layout_of(ts);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  ASSERT_EQ(l->regions().size(), 1u);
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 1024, 1024}));
}

TEST(KvLayoutTest, PermutedHeadMajorStridesAreStillContiguous) {
  // Logical (nb, block_size=4, heads=2, head_dim=8) stored head-major (HND).
  kv_tensor_desc t{k_base, {8, 4, 2, 8}, {128, 16, 64, 2}, 2, 0};
  auto l = layout_of({t});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 128, 128}));
}

TEST(KvLayoutTest, PaddingBetweenBlocksIsFine) {
  kv_tensor_desc t{k_base, {8, 4, 2, 8}, {192, 32, 16, 2}, 2, 0};
  auto l = layout_of({t});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  EXPECT_EQ(l->regions()[0], (kv_region{k_base, 192, 128}));
}

TEST(KvLayoutTest, GapInsideABlockIsRejected) {
  // Rows padded from 16 to 20 bytes: one block's bytes are not contiguous.
  kv_tensor_desc t{k_base, {8, 4, 2, 8}, {160, 40, 20, 2}, 2, 0};
  auto l = layout_of({t});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.code(), errc::layout_mismatch);
  EXPECT_NE(l.error().message().find("not contiguous"), std::string::npos) << l.error().message();
}

TEST(KvLayoutTest, OverlappingBlocksAreRejected) {
  kv_tensor_desc t{k_base, {8, 64}, {32, 1}, 1, 0};
  EXPECT_EQ(layout_of({t}).code(), errc::layout_mismatch);
  // A "K/V" dim interleaved with the blocks: overlaps the block span.
  kv_tensor_desc kv{k_base, {2, 8, 64}, {256, 64, 1}, 1, 1};
  EXPECT_EQ(layout_of({kv}).code(), errc::layout_mismatch);
}

TEST(KvLayoutTest, MalformedDescriptorsAreInvalid) {
  EXPECT_EQ(kv_layout::from_tensors({}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{k_base, {8, 4}, {4}, 1, 0}}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{k_base, {8, 4}, {4, 1}, 1, 2}}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{k_base, {8, 0}, {4, 1}, 1, 0}}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{k_base, {8, 4}, {4, -1}, 1, 0}}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{0, {8, 4}, {4, 1}, 1, 0}}).code(), errc::invalid_argument);
  EXPECT_EQ(layout_of({{k_base, {8, 4}, {4, 1}, 0, 0}}).code(), errc::invalid_argument);
}

TEST(KvLayoutTest, TensorsMustAgreeOnNumBlocks) {
  auto l = layout_of({tensor(k_base, {8, 64}, 1, 0), tensor(k_base + 4096, {9, 64}, 1, 0)});
  EXPECT_EQ(l.code(), errc::layout_mismatch);
}

TEST(KvLayoutTest, SharedTensorIsKeptOnce) {
  auto t = tensor(k_base, {8, 64}, 1, 0);
  auto l = layout_of({t, tensor(k_base + 4096, {8, 32}, 1, 0), t});
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->regions().size(), 2u);
  EXPECT_EQ(l->gpu_block_bytes(), 96u);
}

TEST(KvLayoutTest, FromRegionsChecksPages) {
  EXPECT_TRUE(kv_layout::from_regions({{k_base, 64, 64}}, 4).ok());
  EXPECT_EQ(kv_layout::from_regions({{k_base, 32, 64}}, 4).code(), errc::layout_mismatch);
  EXPECT_EQ(kv_layout::from_regions({}, 4).code(), errc::invalid_argument);
}

class KvOpBuilderTest : public testing::Test {
 protected:
  static constexpr uintptr_t k_cpu = 0x70000000;
  // Two regions: A (page 32, stride 64) and B (page 16, stride 16); 10 GPU blocks.
  kv_layout layout_ =
      kv_layout::from_regions({{k_base, 64, 32}, {k_base + 0x10000, 16, 16}}, 10).value();

  kv_transfer_spec spec(direction dir, uint32_t factor, const std::vector<int64_t>& slots,
                        const std::vector<int64_t>& blocks, uint64_t block_index = 0) {
    kv_transfer_spec s;
    s.dir = dir;
    s.block_size_factor = factor;
    s.cpu = {k_cpu, 256, 4};
    s.cpu_slot_ids = slots;
    s.gpu_block_ids = blocks;
    s.block_index = block_index;
    return s;
  }
  static copy_op op(uintptr_t src, uintptr_t dst, size_t bytes) {
    return {reinterpret_cast<const void*>(src), reinterpret_cast<void*>(dst), bytes};
  }
  static void expect_ops(const std::vector<copy_op>& got, const std::vector<copy_op>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].src, want[k].src) << "op " << k;
      EXPECT_EQ(got[k].dst, want[k].dst) << "op " << k;
      EXPECT_EQ(got[k].bytes, want[k].bytes) << "op " << k;
    }
  }
};

TEST_F(KvOpBuilderTest, StorePacksSubBlocksThenRegions) {
  // factor 2: slot 3 gets GPU blocks 7 and 2; inside a sub-block A at +0, B at +32.
  auto ops = layout_.build_ops(spec(direction::gpu_to_cpu, 2, {3}, {7, 2}));
  ASSERT_TRUE(ops.ok()) << ops.error().to_string();
  const uintptr_t slot = k_cpu + 3 * 256;
  expect_ops(*ops,
             {op(k_base + 7 * 64, slot, 32), op(k_base + 0x10000 + 7 * 16, slot + 32, 16),
              op(k_base + 2 * 64, slot + 48, 32), op(k_base + 0x10000 + 2 * 16, slot + 80, 16)});
}

TEST_F(KvOpBuilderTest, LoadMirrorsTheStore) {
  auto store = layout_.build_ops(spec(direction::gpu_to_cpu, 2, {1, 0}, {4, 5, 8, 9}));
  auto load = layout_.build_ops(spec(direction::cpu_to_gpu, 2, {1, 0}, {4, 5, 8, 9}));
  ASSERT_TRUE(store.ok() && load.ok());
  ASSERT_EQ(store->size(), load->size());
  for (size_t k = 0; k < store->size(); ++k) {
    EXPECT_EQ((*store)[k].src, (*load)[k].dst);
    EXPECT_EQ((*store)[k].dst, (*load)[k].src);
    EXPECT_EQ((*store)[k].bytes, (*load)[k].bytes);
  }
}

TEST_F(KvOpBuilderTest, MisalignedStartSkipsSubBlocksOfTheFirstSlot) {
  // factor 4, block_index 6: 6 % 4 = 2 sub-blocks of slot 2 are skipped; 2 + 4 GPU blocks.
  auto ops = layout_.build_ops(spec(direction::cpu_to_gpu, 4, {2, 0}, {1, 2, 3, 4, 5, 6}, 6));
  ASSERT_TRUE(ops.ok()) << ops.error().to_string();
  ASSERT_EQ(ops->size(), 12u);
  const uintptr_t slot2 = k_cpu + 2 * 256;
  EXPECT_EQ((*ops)[0].src, reinterpret_cast<const void*>(slot2 + 2 * 48));  // sub-block 2, A
  EXPECT_EQ((*ops)[0].dst, reinterpret_cast<void*>(k_base + 1 * 64));
  EXPECT_EQ((*ops)[3].src, reinterpret_cast<const void*>(slot2 + 3 * 48 + 32));  // sub 3, B
  EXPECT_EQ((*ops)[4].src, reinterpret_cast<const void*>(k_cpu));                // slot 0, sub 0
  EXPECT_EQ((*ops)[4].dst, reinterpret_cast<void*>(k_base + 3 * 64));
  // block_index only matters modulo the factor.
  auto same = layout_.build_ops(spec(direction::cpu_to_gpu, 4, {2, 0}, {1, 2, 3, 4, 5, 6}, 2));
  ASSERT_TRUE(same.ok());
  expect_ops(*same, *ops);
}

TEST_F(KvOpBuilderTest, ConsecutiveBlocksOfOneRegionMerge) {
  auto single = kv_layout::from_regions({{k_base, 128, 128}}, 16).value();
  const std::vector<int64_t> slots{0, 1}, blocks{4, 5, 6, 9};  // the spec holds spans
  kv_transfer_spec s = spec(direction::gpu_to_cpu, 2, slots, blocks);
  s.cpu.slot_stride = 256;
  auto ops = single.build_ops(s);
  ASSERT_TRUE(ops.ok()) << ops.error().to_string();
  // 4,5 -> slot 0 is one copy; 6 -> slot 1 sub 0 continues it too (slot 0 ends where 1 starts);
  // 9 is not contiguous on the GPU side.
  expect_ops(*ops, {op(k_base + 4 * 128, k_cpu, 384), op(k_base + 9 * 128, k_cpu + 384, 128)});
}

TEST_F(KvOpBuilderTest, EmptyTransferHasNoOps) {
  auto ops = layout_.build_ops(spec(direction::gpu_to_cpu, 2, {}, {}));
  ASSERT_TRUE(ops.ok());
  EXPECT_TRUE(ops->empty());
}

TEST_F(KvOpBuilderTest, BadRequestsAreRejected) {
  auto code = [&](const kv_transfer_spec& s) { return layout_.build_ops(s).code(); };
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 0, {0}, {1})), errc::invalid_argument);
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 2, {0}, {1})), errc::invalid_argument);  // count
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 2, {0}, {1, 2}, 1)), errc::invalid_argument);
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 1, {}, {1})), errc::invalid_argument);
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 1, {0}, {10})), errc::invalid_argument);  // gpu id
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 1, {0}, {-1})), errc::invalid_argument);
  EXPECT_EQ(code(spec(direction::gpu_to_cpu, 1, {4}, {1})), errc::invalid_argument);  // slot id
  // 8 * 48 bytes > slot stride 256
  auto r = layout_.build_ops(spec(direction::gpu_to_cpu, 8, {0}, {0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_NE(r.error().message().find("slot_stride"), std::string::npos);
}

}  // namespace
}  // namespace kvc::cuda
