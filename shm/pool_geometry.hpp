#pragma once
/// Geometry of the node's pinned CPU pool and how it is sized from vLLM's `cpu_bytes_to_use`.
///
/// The pool is rank-major: rank r owns one contiguous region of `num_slots` slots, and slot s of
/// rank r lives at `pool_base + (r * num_slots + s) * slot_stride()`. Every rank uses the same
/// slot ids (a cpu_slot names one block across all ranks), so a worker touches only its region.
/// slot_stride() is the per-rank block size rounded up to 4 KiB so that every slot starts on a
/// page. Plain values: thread-safe to copy and read.
#include <cstdint>

#include "proto/status.hpp"

namespace kvc::shm {

/// Slots start on a page boundary.
inline constexpr uint64_t slot_alignment = 4096;
/// The header region before the pool; the pool starts at this offset in the segment, which keeps
/// the pool 2 MiB-aligned wherever the segment is mapped 2 MiB-aligned.
inline constexpr uint64_t pool_offset = uint64_t{2} << 20;

struct pool_geometry {
  uint32_t world_size = 0;  ///< ranks sharing the pool (TP x PP of this node)
  uint32_t num_slots = 0;   ///< CPU slots per rank (= number of offloaded blocks)
  uint64_t slot_bytes = 0;  ///< bytes of one offloaded block on one rank

  uint64_t slot_stride() const noexcept {
    return (slot_bytes + slot_alignment - 1) / slot_alignment * slot_alignment;
  }
  /// Bytes of one rank's region.
  uint64_t rank_bytes() const noexcept { return uint64_t{num_slots} * slot_stride(); }
  /// Bytes of the whole pool (all ranks), without the header region.
  uint64_t pool_bytes() const noexcept { return uint64_t{world_size} * rank_bytes(); }
  /// Exact size of the shared-memory segment: header region + pool.
  uint64_t segment_bytes() const noexcept { return pool_offset + pool_bytes(); }

  friend bool operator==(const pool_geometry&, const pool_geometry&) = default;
};

/// Checks that every field is non-zero and that segment_bytes() does not overflow.
status validate(const pool_geometry& g);

/// vLLM's sizing: `cpu_bytes_to_use` is the total over all ranks of the node, so
/// num_slots = cpu_bytes_to_use / (world_size * per_rank_bytes_per_block). errc::invalid_argument
/// when world_size or the block size is 0, when the budget holds no block (num_slots == 0), or
/// when the slot count does not fit a cpu_slot (32 bits) or the segment size overflows.
result<pool_geometry> size_pool(uint64_t cpu_bytes_to_use, uint32_t world_size,
                                uint64_t per_rank_bytes_per_block);

}  // namespace kvc::shm
