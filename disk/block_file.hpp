#pragma once
/// block_file: the on-disk format of one block of the file tier, and the run digest that names a
/// run's directory. Pure functions over bytes (no I/O); thread-safe.
///
/// A block file is one header page followed by the block's KV bytes, padded with zeros to a
/// whole page so that the file can be written and read with O_DIRECT:
///
///   offset 0   header (little-endian), `header_bytes` (4096) long, zero-padded:
///     0  magic "KVCBLK\0\1"  8   version (u32)        12 header_bytes (u32)
///     16 key.hi (u64)        24  key.lo (u64)         32 payload_bytes (u64)
///     40 run digest (16 bytes)                        56 rank (u32)
///     60 payload CRC-32 (u32)                         64 header CRC-32 of bytes [0, 64) (u32)
///   offset 4096  payload_bytes of KV, then zeros up to the next multiple of 4096.
///
/// A file is taken as the block's KV only when every field matches what the reader expects (magic,
/// version, key, sizes, run digest, rank), the file has exactly file_bytes(payload) bytes and both
/// checksums match (proto/frame_checksum.hpp's CRC-32). Anything else - a torn write, a flipped
/// byte, another run's or another rank's file, a file cut short - is refused with the reason.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "proto/block_key.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::disk {

/// File sizes and offsets are multiples of this (O_DIRECT's alignment on common file systems).
inline constexpr size_t page_bytes = 4096;
inline constexpr size_t header_bytes = page_bytes;
inline constexpr uint32_t format_version = 1;

/// 128 bits naming a run's configuration (model, KV geometry, topology): runs with the same
/// description share a directory, runs with different ones never read each other's files.
struct run_digest {
  std::array<uint8_t, 16> bytes{};
  /// 32 lower-case hex digits.
  std::string hex() const;
  friend bool operator==(const run_digest&, const run_digest&) = default;
};

/// The digest of a run description (its exact bytes): two 64-bit FNV-1a passes with different
/// offsets. Not cryptographic: the config record beside the files keeps the full description, and
/// a differing one is refused, so a collision cannot mix runs.
run_digest digest_of(std::string_view description);

/// What a reader expects of a block's file.
struct block_file_id {
  block_key key;
  uint64_t payload_bytes = 0;
  run_digest run;
  rank_id rank = 0;
};

/// Bytes of a block file holding `payload_bytes` of KV (header page + padded payload).
constexpr uint64_t file_bytes(uint64_t payload_bytes) noexcept {
  return header_bytes + (payload_bytes + page_bytes - 1) / page_bytes * page_bytes;
}

/// Fills `header` (header_bytes long) for `id` and the payload's CRC-32.
void encode_header(const block_file_id& id, uint32_t payload_crc, std::span<char> header);

/// Checks a header against `id`: magic, version, sizes, key, run digest, rank and the header's
/// own checksum. errc::layout_mismatch with the reason when anything differs. Returns the
/// payload's CRC-32 recorded in it.
result<uint32_t> check_header(const block_file_id& id, std::span<const char> header);

/// The file name of a block: 32 hex digits of the key and ".kvb".
std::string file_name(const block_key& key);
/// The key of a block file's name, or errc::invalid_argument when the name is not one.
result<block_key> key_of_file_name(std::string_view name);

}  // namespace kvc::disk
