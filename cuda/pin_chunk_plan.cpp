#include "cuda/pin_chunk_plan.hpp"

#include <algorithm>
#include <string>

namespace kvc::cuda {

result<std::vector<pin_chunk>> plan_pin_chunks(size_t region_bytes, size_t slot_stride,
                                               size_t max_chunk_bytes) {
  if (region_bytes == 0 || slot_stride == 0 || max_chunk_bytes == 0) {
    return make_error(errc::invalid_argument,
                      "pin chunks: region bytes, slot stride and chunk limit must be > 0");
  }
  if (slot_stride > max_chunk_bytes) {
    return make_error(errc::invalid_argument,
                      "pin chunks: a slot of " + std::to_string(slot_stride) +
                          " bytes does not fit a pinning chunk of at most " +
                          std::to_string(max_chunk_bytes) + " bytes");
  }
  const size_t chunk = max_chunk_bytes / slot_stride * slot_stride;
  std::vector<pin_chunk> out;
  out.reserve(region_bytes / chunk + 1);
  for (size_t off = 0; off < region_bytes; off += std::min(chunk, region_bytes - off)) {
    out.push_back({off, std::min(chunk, region_bytes - off)});
  }
  return out;
}

}  // namespace kvc::cuda
