#pragma once
/// frame_checksum: the CRC-32 every framed byte stream of kvconnect carries, so that a flipped
/// bit is refused instead of decoding into a different value: the step channel's wire frames
/// (actors/channel/wire_codec.hpp), the run record's frames (actors/record/record_codec.hpp) and
/// the file tier's block files (disk/block_file.hpp). Computed by Intel ISA-L (carry-less
/// multiply) where the build found libisal, by zlib otherwise: the same value either way.
/// Pure function; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>

namespace kvc {

/// A checksum's size in a frame (stored little-endian).
inline constexpr size_t checksum_bytes = 4;

/// CRC-32 (IEEE 802.3, zlib's) of `bytes`.
uint32_t frame_checksum(std::span<const char> bytes) noexcept;

}  // namespace kvc
