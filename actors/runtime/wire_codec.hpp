#pragma once
/// wire_codec: the per-step messages of the ZeroMQ data plane (data_plane.hpp) as bytes. Each
/// frame is one tag byte (wire_kind) followed by the message serialised with CAF's binary
/// serialiser through the same `inspect` overloads the actor messages use, so the data plane
/// carries the typed proto/ structs, never text.
///
/// Decoding checks the tag, the whole payload (no trailing bytes) and the ids' ranges the codec
/// can know; anything else is one errc::protocol_mismatch naming what was wrong.
/// Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::runtime {

enum class wire_kind : uint8_t {
  hello = 1,     ///< worker -> scheduler: this connection is (rank, incarnation)
  metadata = 2,  ///< scheduler -> worker: one step's connector_metadata
  report = 3,    ///< worker -> scheduler: a rank's completion events of one step
};

/// The first frame a worker sends on its data-plane connection. The token is the deployment's
/// shared secret (the one its CAF registration presented): the data plane listens on a port of
/// its own, so it checks it too.
struct wire_hello {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  std::string token;
  friend bool operator==(const wire_hello&, const wire_hello&) = default;
};

/// A rank's reports of one step (possibly none): closes that step for the rank, like the
/// coordinator actor's report message.
struct step_report {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  step_id step = 0;
  std::vector<completion_event> events;
  friend bool operator==(const step_report&, const step_report&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, wire_hello& x) {
  return f(x.rank, x.incarnation, x.token);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(x.rank, x.incarnation, x.step, x.events);
}

using wire_bytes = std::vector<char>;

wire_bytes encode(const wire_hello& x);
wire_bytes encode(const connector_metadata& x);
wire_bytes encode(const step_report& x);

/// The tag of a frame; errc::protocol_mismatch for an empty frame or an unknown tag.
result<wire_kind> kind_of(std::span<const char> frame);

result<wire_hello> decode_hello(std::span<const char> frame);
result<connector_metadata> decode_metadata(std::span<const char> frame);
result<step_report> decode_report(std::span<const char> frame);

}  // namespace kvc::runtime
