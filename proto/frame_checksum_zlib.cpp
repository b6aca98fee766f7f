#include "proto/frame_checksum.hpp"

#include <algorithm>

#include <zlib.h>

namespace kvc {

uint32_t frame_checksum(std::span<const char> bytes) noexcept {
  // zlib's length type is 32-bit: longer inputs go in pieces.
  constexpr size_t piece = size_t{1} << 30;
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t at = 0; at < bytes.size(); at += piece) {
    const size_t n = std::min(piece, bytes.size() - at);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace kvc
