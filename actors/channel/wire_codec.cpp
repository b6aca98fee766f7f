#include "actors/channel/wire_codec.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>

namespace kvc::channel {

namespace {

uint32_t read_trailer(std::span<const char> frame) {
  uint32_t v = 0;
  for (size_t i = 0; i < checksum_bytes; ++i) {
    v |= uint32_t{static_cast<uint8_t>(frame[frame.size() - checksum_bytes + i])} << (8 * i);
  }
  return v;
}

template <class T>
wire_bytes encode_as(wire_kind kind, const T& value) {
  wire_bytes buf{static_cast<char>(kind)};
  caf::binary_serializer sink{nullptr, buf};
  // inspect() takes a mutable reference for both directions; a serialiser only reads, so the
  // message is not copied. Serialising plain structs into a vector cannot fail (no
  // type-erased content, no I/O).
  if (auto err = sink(const_cast<T&>(value))) std::abort();
  seal_frame(buf);
  return buf;
}

status refuse(const std::string& what) {
  return make_error(errc::protocol_mismatch, "step channel: " + what);
}

bool valid(transfer_kind k) noexcept { return is_gpu_transfer(k) || is_tier_job(k); }

/// Values the types can hold but no rank or scheduler sends (found by fuzzing: a NaN
/// `seconds` poisons the coordinator's max); refused like a malformed frame.
status check(const wire_hello&) { return {}; }

status check(const connector_metadata& m) {
  if (!m.failed.empty()) {
    std::vector<job_id> flushed = m.flush;
    std::sort(flushed.begin(), flushed.end());
    for (job_id id : m.failed) {
      if (!std::binary_search(flushed.begin(), flushed.end(), id)) {
        return refuse("metadata names job " + std::to_string(id) + " failed but not flushed");
      }
    }
  }
  for (const auto* jobs : {&m.loads, &m.stores}) {
    for (const transfer_job& j : *jobs) {
      if (!is_gpu_transfer(j.kind)) return refuse("a job of unknown kind in metadata");
    }
  }
  for (const tier_job& j : m.tier_jobs) {
    if (!is_tier_job(j.kind)) return refuse("a file tier job of unknown kind in metadata");
    const size_t want_slots = j.kind == transfer_kind::check ? 0 : j.keys.size();
    if (j.slots.size() != want_slots) {
      return refuse("a file tier " + std::string{to_string(j.kind)} + " job with " +
                    std::to_string(j.slots.size()) + " slots for " +
                    std::to_string(j.keys.size()) + " blocks");
    }
  }
  return {};
}

status check(const step_report& r) {
  for (const completion_event& e : r.events) {
    if (!valid(e.kind)) return refuse("a completion event of unknown kind");
    if (static_cast<size_t>(e.error) >= errc_count) {
      return refuse("a completion event with an unknown error code");
    }
    if (!(e.seconds >= 0.0)) {  // NaN compares false
      return refuse("a completion event whose seconds is NaN or negative");
    }
    if (e.detail.size() > max_detail_bytes) {
      return refuse("a completion event whose detail has " + std::to_string(e.detail.size()) +
                    " bytes (at most " + std::to_string(max_detail_bytes) + ")");
    }
    if (e.ok && !e.detail.empty()) {
      return refuse("a successful completion event with a failure detail");
    }
  }
  return {};
}

template <class T>
result<T> decode_as(wire_kind want, const char* what, std::span<const char> frame) {
  if (frame.size() > max_frame_bytes) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: a "} + what +
                                                   " frame of " + std::to_string(frame.size()) +
                                                   " bytes is above the limit");
  }
  auto k = kind_of(frame);
  if (!k) return k.error();
  if (*k != want) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: expected a "} + what +
                                                   " frame, got tag " +
                                                   std::to_string(static_cast<unsigned>(*k)));
  }
  if (frame.size() < 1 + checksum_bytes) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: "} + what +
                                                   " frame of " + std::to_string(frame.size()) +
                                                   " bytes has no checksum");
  }
  const auto sealed = frame.first(frame.size() - checksum_bytes);
  if (frame_checksum(sealed) != read_trailer(frame)) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: "} + what +
                                                   " frame (" + std::to_string(frame.size()) +
                                                   " bytes) fails its checksum: corrupt");
  }
  T value{};
  caf::binary_deserializer src{nullptr, sealed.data() + 1, sealed.size() - 1};
  if (auto err = src(value)) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: malformed "} + what +
                                                   " frame (" + std::to_string(frame.size()) +
                                                   " bytes)");
  }
  if (src.remaining() != 0) {
    return make_error(errc::protocol_mismatch, std::string{"step channel: "} + what +
                                                   " frame has " + std::to_string(src.remaining()) +
                                                   " trailing bytes");
  }
  if (auto st = check(value); !st) return st;
  return value;
}

}  // namespace

void seal_frame(wire_bytes& frame) {
  const uint32_t c = frame_checksum(frame);
  for (size_t i = 0; i < checksum_bytes; ++i) frame.push_back(static_cast<char>(c >> (8 * i)));
}

wire_bytes encode(const wire_hello& x) {
  return encode_as(wire_kind::hello, x);
}

wire_bytes encode(const connector_metadata& x) {
  return encode_as(wire_kind::metadata, x);
}

wire_bytes encode(const step_report& x) {
  return encode_as(wire_kind::report, x);
}

result<wire_kind> kind_of(std::span<const char> frame) {
  if (frame.empty()) return make_error(errc::protocol_mismatch, "step channel: empty frame");
  const auto tag = static_cast<uint8_t>(frame[0]);
  if (tag < static_cast<uint8_t>(wire_kind::hello) ||
      tag > static_cast<uint8_t>(wire_kind::report)) {
    return make_error(errc::protocol_mismatch,
                      "step channel: unknown frame tag " + std::to_string(tag));
  }
  return static_cast<wire_kind>(tag);
}

result<wire_hello> decode_hello(std::span<const char> frame) {
  return decode_as<wire_hello>(wire_kind::hello, "hello", frame);
}

result<connector_metadata> decode_metadata(std::span<const char> frame) {
  return decode_as<connector_metadata>(wire_kind::metadata, "metadata", frame);
}

result<step_report> decode_report(std::span<const char> frame) {
  return decode_as<step_report>(wire_kind::report, "report", frame);
}

result<frame_summary> summarize(std::span<const char> frame) {
  auto k = kind_of(frame);
  if (!k) return k.error();
  frame_summary out{.kind = *k};
  caf::binary_deserializer src{nullptr, frame.data() + 1, frame.size() - 1};
  caf::error err;
  switch (*k) {
    case wire_kind::hello:
      err = src(out.rank, out.incarnation);
      break;
    case wire_kind::metadata:
      err = src(out.step);
      break;
    case wire_kind::report:
      err = src(out.rank, out.incarnation, out.step);
      break;
  }
  if (err) {
    return make_error(errc::protocol_mismatch, "step channel: a frame too short to summarize (" +
                                                   std::to_string(frame.size()) + " bytes)");
  }
  return out;
}

}  // namespace kvc::channel
