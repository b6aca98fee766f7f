#include "cuda/pin_chunk_plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace kvc::cuda {

result<std::vector<pin_chunk>> plan_pin_chunks(size_t region_bytes, size_t slot_stride,
                                               size_t max_chunk_bytes, size_t page_bytes) {
  if (region_bytes == 0 || slot_stride == 0 || max_chunk_bytes == 0 || page_bytes == 0) {
    return make_error(errc::invalid_argument,
                      "pin chunks: region bytes, slot stride, chunk limit and page size must be > 0");
  }
  if (region_bytes <= max_chunk_bytes) return std::vector<pin_chunk>{{0, region_bytes}};
  const size_t step = slot_stride / std::gcd(slot_stride, page_bytes);
  const bool overflows = step > max_chunk_bytes / page_bytes;
  const size_t boundary = overflows ? 0 : step * page_bytes;  // lcm(slot_stride, page_bytes)
  if (overflows || boundary > max_chunk_bytes) {
    return make_error(errc::invalid_argument,
                      "pin chunks: a region of " + std::to_string(region_bytes) +
                          " bytes needs chunks that end on both a slot (stride " +
                          std::to_string(slot_stride) + ") and a page (" +
                          std::to_string(page_bytes) + " bytes), which do not fit a pinning "
                          "chunk of at most " + std::to_string(max_chunk_bytes) + " bytes");
  }
  const size_t chunk = max_chunk_bytes / boundary * boundary;
  std::vector<pin_chunk> out;
  out.reserve(region_bytes / chunk + 1);
  for (size_t off = 0; off < region_bytes; off += std::min(chunk, region_bytes - off)) {
    out.push_back({off, std::min(chunk, region_bytes - off)});
  }
  return out;
}

}  // namespace kvc::cuda
