#include "actors/channel/wire_codec.hpp"

#include <cstdlib>
#include <string>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>

namespace kvc::channel {

namespace {

template <class T>
wire_bytes encode_as(wire_kind kind, const T& value) {
  wire_bytes buf{static_cast<char>(kind)};
  caf::binary_serializer sink{nullptr, buf};
  // inspect() takes a mutable reference for both directions; a serialiser only reads, so the
  // message is not copied. Serialising plain structs into a vector cannot fail (no
  // type-erased content, no I/O).
  if (auto err = sink(const_cast<T&>(value))) std::abort();
  return buf;
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
  T value{};
  caf::binary_deserializer src{nullptr, frame.data() + 1, frame.size() - 1};
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
  return value;
}

}  // namespace

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
