#pragma once
/// pin_chunk_plan: how a pool region is cut into the chunks the cuda backend pins one
/// cudaHostRegister call each. Chunks hold whole slots: a copy of one slot (or of a sub-block
/// inside it) then lies inside one registration, which the driver needs to treat it as pinned
/// memory; a slot straddling two registrations would be copied as pageable memory, or refused by
/// a batch copy. Chunk boundaries also fall on page boundaries (the region's base is
/// page-aligned): the driver pins whole pages, and a page shared by two chunks makes the second
/// cudaHostRegister fail (cudaErrorHostMemoryAlreadyRegistered). So boundaries sit at multiples
/// of lcm(slot stride, page size). Each chunk is at most `max_chunk_bytes`; all but the last
/// hold the same number of slots; the last holds the rest, including a partial trailing slot
/// when the region is not a whole number of slots. A region that fits one chunk is one chunk,
/// whatever its stride. Pure function.
#include <cstddef>
#include <vector>

#include "proto/status.hpp"

namespace kvc::cuda {

struct pin_chunk {
  size_t offset = 0;  ///< from the region's base; a multiple of the slot stride and of the page
  size_t bytes = 0;

  friend bool operator==(const pin_chunk&, const pin_chunk&) = default;
};

/// Chunks covering [0, region_bytes) in order. errc::invalid_argument for zero region bytes,
/// a zero slot stride, chunk limit or page size, or a region larger than one chunk whose
/// boundaries (multiples of lcm(slot_stride, page_bytes)) cannot fit the chunk limit.
result<std::vector<pin_chunk>> plan_pin_chunks(size_t region_bytes, size_t slot_stride,
                                               size_t max_chunk_bytes, size_t page_bytes = 4096);

}  // namespace kvc::cuda
