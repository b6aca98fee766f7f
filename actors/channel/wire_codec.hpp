#pragma once
/// wire_codec: the step channel's messages as bytes. Each frame is one tag byte (wire_kind),
/// the message serialised with CAF's binary serialiser through the proto/ structs' `inspect`
/// overloads (the channel carries the typed structs, never text), and a CRC-32 of the two
/// (4 bytes, little-endian), so that bit flips on the way are refused instead of decoding into
/// a different report.
///
/// Decoding checks the frame's size against max_frame_bytes, the tag, the checksum, the whole
/// payload (no trailing bytes) and the values no peer sends (a job or event kind other than
/// load/store, an unknown errc, seconds that are NaN or negative); anything else is one
/// errc::protocol_mismatch naming what was wrong.
/// Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/connector_metadata.hpp"
#include "proto/frame_checksum.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "proto/step_report.hpp"

namespace kvc::channel {

enum class wire_kind : uint8_t {
  hello = 1,     ///< rank -> scheduler: this connection is (rank, incarnation)
  metadata = 2,  ///< scheduler -> rank: one step's connector_metadata
  report = 3,    ///< rank -> scheduler: one step_report
};

/// Largest frame either end accepts (transports drop larger ones before they are read whole).
/// A step's metadata for 256 requests of 1,000 blocks each is about 4 MiB.
inline constexpr size_t max_frame_bytes = size_t{64} << 20;

/// The first frame a rank sends on its connection. The token is the deployment's shared secret
/// (the one its registration presented): the channel listens on a port of its own, so it checks
/// it too.
struct wire_hello {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  std::string token;
  friend bool operator==(const wire_hello&, const wire_hello&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_hello& x) {
  return f(x.rank, x.incarnation, x.token);
}

using wire_bytes = std::vector<char>;

/// Appends the checksum (proto/frame_checksum.hpp: frame_checksum, checksum_bytes) of
/// `frame` (tag + payload) to it. encode() does it; tests and fuzzers that build raw frames use
/// it to get past the checksum.
void seal_frame(wire_bytes& frame);

wire_bytes encode(const wire_hello& x);
wire_bytes encode(const connector_metadata& x);
wire_bytes encode(const step_report& x);

/// The tag of a frame; errc::protocol_mismatch for an empty frame or an unknown tag.
result<wire_kind> kind_of(std::span<const char> frame);

result<wire_hello> decode_hello(std::span<const char> frame);
result<connector_metadata> decode_metadata(std::span<const char> frame);
result<step_report> decode_report(std::span<const char> frame);

/// What a frame's leading fields say, read without decoding the rest (for traces): its kind,
/// and the step (metadata, report) and the rank and incarnation (hello, report) it carries.
struct frame_summary {
  wire_kind kind = wire_kind::hello;
  step_id step = 0;
  rank_id rank = 0;
  uint32_t incarnation = 0;
};

/// errc::protocol_mismatch when the tag or the leading fields cannot be read.
result<frame_summary> summarize(std::span<const char> frame);

}  // namespace kvc::channel
