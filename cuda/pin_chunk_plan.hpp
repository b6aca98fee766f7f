#pragma once
/// pin_chunk_plan: how a pool region is cut into the chunks the cuda backend pins one
/// cudaHostRegister call each. Chunks hold whole slots: a copy of one slot (or of a sub-block
/// inside it) then lies inside one registration, which the driver needs to treat it as pinned
/// memory; a slot straddling two registrations would be copied as pageable memory, or refused by
/// a batch copy. Each chunk is at most `max_chunk_bytes`; all but the last hold the same number of
/// slots; the last holds the rest, including a partial trailing slot when the region is not a
/// whole number of slots. Pure function.
#include <cstddef>
#include <vector>

#include "proto/status.hpp"

namespace kvc::cuda {

struct pin_chunk {
  size_t offset = 0;  ///< from the region's base; a multiple of the slot stride
  size_t bytes = 0;

  friend bool operator==(const pin_chunk&, const pin_chunk&) = default;
};

/// Chunks covering [0, region_bytes) in order. errc::invalid_argument for zero region bytes,
/// a zero slot stride or chunk limit, or a slot stride larger than the chunk limit (a slot
/// cannot be split).
result<std::vector<pin_chunk>> plan_pin_chunks(size_t region_bytes, size_t slot_stride,
                                               size_t max_chunk_bytes);

}  // namespace kvc::cuda
