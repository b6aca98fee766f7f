#pragma once
/// kv_layout: turns the GPU KV-cache tensors vLLM registers into a canonical list of regions and
/// builds the copy ops of one offload transfer from it. Pure (no CUDA, no threads); immutable
/// after construction, so concurrent const use is safe.
///
/// Tensors. Each tensor is described by its base address, shape, strides in bytes, element size
/// and which dim counts GPU blocks. The bytes of one block inside a tensor (all dims but the
/// block dim, minus the dims that lie *outside* the block span) must be dense, in any dim order
/// (NHD and HND both work: we copy raw bytes). Dims whose stride reaches past the whole
/// block span (the K/V dim of FlashAttention's (2, num_blocks, ...)) split a tensor into one
/// region per index. Layouts met in vLLM:
///   per layer      (num_blocks, block_size, heads, head_dim)        -> 1 region
///   FlashAttention (2, num_blocks, block_size, heads, head_dim)     -> 2 regions (K, V)
///   FlashInfer     (num_blocks, 2, block_size, heads, head_dim)     -> 1 region
///   cross-layer    (num_blocks, layers * page)                      -> 1 region
/// A gap inside a block (padding) or overlapping blocks is errc::layout_mismatch. Identical
/// regions (a tensor shared by layers) are kept once; a region that continues the previous one
/// inside every block (per-layer views of one cross-layer tensor) is merged into it.
///
/// CPU slot packing (one offloaded block = `factor` consecutive GPU blocks of every region):
///   slot bytes = factor * gpu_block_bytes(); sub-block j in [0, factor) occupies
///   [j * gpu_block_bytes(), (j+1) * gpu_block_bytes()), and inside it region i's page sits at
///   region_offset(i) = sum of page_bytes of regions before i.
/// Stores and loads use this same packing; slot s of the rank lives at cpu.base + s*slot_stride.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

/// One GPU KV tensor as the engine sees it (torch: data_ptr, shape, stride * element_size).
struct kv_tensor_desc {
  uintptr_t base = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  ///< in bytes
  uint64_t element_size = 0;
  int block_dim = 0;  ///< the dim that indexes GPU blocks
};

/// GPU block b of a region is page_bytes contiguous bytes at base + b * block_stride.
struct kv_region {
  uintptr_t base = 0;
  uint64_t block_stride = 0;
  uint64_t page_bytes = 0;

  friend bool operator==(const kv_region&, const kv_region&) = default;
};

/// The rank's CPU slots: slot s (s < num_slots) at base + s * slot_stride.
struct cpu_slots {
  uintptr_t base = 0;
  uint64_t slot_stride = 0;
  uint64_t num_slots = 0;
};

/// One transfer, in vLLM's terms. For a store the GPU blocks are the source, for a load the
/// destination. The first CPU block skips `block_index % factor` sub-blocks (a load that starts
/// inside an offloaded block, or a store whose leading GPU blocks are null); so
/// gpu_block_ids.size() == cpu_slot_ids.size() * factor - block_index % factor.
struct kv_transfer_spec {
  direction dir = direction::gpu_to_cpu;
  uint32_t block_size_factor = 1;
  cpu_slots cpu;
  std::span<const int64_t> cpu_slot_ids;
  std::span<const int64_t> gpu_block_ids;
  uint64_t block_index = 0;
};

class kv_layout {
 public:
  /// Canonicalises tensors (see the file comment). Malformed descriptors are
  /// errc::invalid_argument; unsupported layouts and differing num_blocks errc::layout_mismatch.
  static result<kv_layout> from_tensors(std::span<const kv_tensor_desc> tensors);
  /// From regions given directly (each must have page_bytes <= block_stride).
  static result<kv_layout> from_regions(std::vector<kv_region> regions, uint64_t num_blocks);

  const std::vector<kv_region>& regions() const noexcept { return regions_; }
  uint64_t num_blocks() const noexcept { return num_blocks_; }
  /// Bytes of one GPU block over all regions.
  uint64_t gpu_block_bytes() const noexcept { return block_bytes_; }
  /// Offset of region i's page inside one sub-block of a CPU slot.
  uint64_t region_offset(size_t i) const noexcept { return offsets_[i]; }
  /// Bytes one offloaded CPU block needs: factor * gpu_block_bytes().
  uint64_t bytes_per_slot(uint32_t factor) const noexcept { return factor * block_bytes_; }

  /// The copy ops of one transfer, adjacent ops merged. errc::invalid_argument for a factor of
  /// 0, ids out of range, a count mismatch, or slots smaller than bytes_per_slot(factor).
  result<std::vector<copy_op>> build_ops(const kv_transfer_spec& spec) const;

 private:
  kv_layout(std::vector<kv_region> regions, uint64_t num_blocks);

  std::vector<kv_region> regions_;
  std::vector<uint64_t> offsets_;
  uint64_t num_blocks_ = 0;
  uint64_t block_bytes_ = 0;
};

}  // namespace kvc::cuda
