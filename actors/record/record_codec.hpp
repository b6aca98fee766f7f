#pragma once
/// record_codec: the byte layout of a run record (run_record.hpp). A file is the 8-byte magic
/// "KVCREC\n\0", then frames: a 4-byte little-endian length, that many bytes of msgpack, and
/// the CRC-32 of the length and the msgpack (proto/frame_checksum.hpp, the step channel's; 4
/// bytes, little-endian), so that any corrupted byte is refused instead of replaying as another
/// run. The first frame is the header, [schema, config digest, config as msgpack bytes]; every
/// later frame is one event, [kind, fields...], in recording order (a request's block hashes
/// only once: hash_memory.hpp).
///
/// Decoding is bounded: a frame over max_record_frame is refused before anything is allocated,
/// msgpack containers may not claim more elements than the frame has bytes, nesting is
/// limited; every malformed frame is one errc::invalid_argument naming what was wrong, an
/// unknown schema errc::protocol_mismatch. Pure functions; thread-safe.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "actors/record/hash_memory.hpp"
#include "actors/record/run_record.hpp"
#include "proto/frame_checksum.hpp"
#include "proto/status.hpp"

namespace kvc::record {

inline constexpr std::string_view record_magic{"KVCREC\n\0", 8};
/// Largest frame a reader accepts (a step of 256 requests of 1,000 blocks is about 4 MiB).
inline constexpr size_t max_record_frame = size_t{64} << 20;

/// A frame's bytes around its payload: the length prefix and the checksum.
inline constexpr size_t record_frame_overhead = 4 + checksum_bytes;

/// `v` as 4 little-endian bytes (a frame's length prefix and checksum).
std::array<char, 4> le32(uint32_t v) noexcept;
/// Completes a frame being written: `frame` points at 4 bytes reserved for the length, followed
/// by `payload_size` bytes of payload. Writes the length there and returns the frame's
/// checksum (of the length and the payload), which the writer appends as le32().
uint32_t seal_record_frame(char* frame, size_t payload_size) noexcept;

/// The config as msgpack bytes (what the digest covers).
std::string encode_config(const recorded_config& c);
/// FNV-1a 64 of `bytes`.
uint64_t config_digest(std::string_view bytes) noexcept;

/// A header frame's payload for `c` (schema record_schema_version, its digest).
std::string encode_header(const recorded_config& c);
/// The schema version a header frame's payload names, if it is a header at all (readers
/// report another version before anything else of the frame: an older record has no
/// checksums, so only its version can be named).
std::optional<uint32_t> header_schema(std::span<const char> payload);
/// errc::protocol_mismatch naming both versions unless `schema` is record_schema_version.
status check_schema(uint32_t schema);
/// Checks the schema first (errc::protocol_mismatch naming both versions), then that the
/// digest matches the config's bytes (errc::protocol_mismatch), then decodes the config.
result<record_header> decode_header(std::span<const char> payload);

/// Event frames' payloads, in record order: a request's block hashes are written once, later
/// events carry the ones appended since (hash_memory.hpp), so one encoder writes one record.
class event_encoder {
 public:
  std::string encode(const record_event& e);

 private:
  hash_memory mem_;
};

/// Reads event frames in record order (the counterpart of event_encoder).
class event_decoder {
 public:
  result<record_event> decode(std::span<const char> payload);

 private:
  hash_memory mem_;
};

/// A whole record file's bytes (magic, header for rec.header.config, every event).
std::string encode_record(const run_record& rec);

/// The event's name as the replay prints it ("build", "report", ...).
std::string_view event_name(const record_event& e) noexcept;

}  // namespace kvc::record
