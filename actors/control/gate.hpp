#pragma once
/// The control plane's gate: no byte of a peer that has not proven it holds the deployment's
/// token reaches CAF's BASP parser (which trusts the length fields of its headers: one forged
/// header made CAF 0.17 allocate ~4 GB). CAF listens on 127.0.0.1 only, on a port of its own;
/// the gatekeeper listens on the public address, reads a fixed-size auth frame (magic + token)
/// from each new connection within auth_timeout — a bounded read into a fixed buffer, no length
/// taken from the peer — and only then relays the connection's bytes to CAF's port. At most
/// max_pending connections wait for their frame (a new one closes the oldest waiting one, so
/// idle connections cannot keep out a peer that sends its frame at once), and one whose frame
/// is wrong or late is closed. A whole frame is answered with one byte, 'Y' (admitted: the relay
/// starts) or 'N' (refused: closed). On the other side a gate_tunnel gives CAF's remote_actor a
/// loopback port of its own: it accepts exactly one connection there, connects to the
/// gatekeeper, sends the frame, reads the answer and relays.
///
/// The token crosses the network in the clear (as in the registration and the step channel's
/// hello): the gate keeps unauthenticated peers away from CAF, it does not encrypt (docs/
/// security.md). Each object runs one thread of its own (poll over non-blocking sockets) and
/// closes every socket it holds when destroyed. Thread-safe: the stats are atomics.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "proto/status.hpp"

namespace kvc::control {

/// 8 bytes of magic ("KVCGATE1") then the token, zero-padded to 64 bytes.
inline constexpr size_t auth_frame_bytes = 72;
inline constexpr size_t max_token_bytes = 64;
using auth_frame = std::array<char, auth_frame_bytes>;

/// errc::invalid_argument for an empty token or one above max_token_bytes.
result<auth_frame> make_auth_frame(std::string_view token);
/// The frame carries the magic and `token` (constant-time compare).
bool check_auth_frame(const auth_frame& frame, std::string_view token) noexcept;

/// A connection's auth frame as its bytes arrive, in pieces of any size: the whole judgement of
/// the gatekeeper's pre-handshake read, pure (no allocation; no length is taken from the peer).
/// It takes at most the bytes the frame still lacks; what follows the frame is the relay's and
/// is never read before the verdict.
class auth_reader {
 public:
  enum class verdict { incomplete, admitted, refused };

  /// Takes the first min(bytes.size(), missing()) bytes (`taken`); the verdict once the frame
  /// is whole (then every later call takes nothing and repeats it).
  verdict feed(std::span<const char> bytes, std::string_view token, size_t& taken) noexcept;
  /// Bytes the frame still lacks (0 once it is whole).
  size_t missing() const noexcept { return auth_frame_bytes - got_; }

 private:
  auth_frame frame_{};
  size_t got_ = 0;
  verdict verdict_ = verdict::incomplete;
};

struct gate_limits {
  size_t max_pending = 64;                       ///< connections waiting for their frame
  std::chrono::milliseconds auth_timeout{2000};  ///< how long one may take to send it
  size_t max_relayed = 1024;                     ///< authenticated connections at once
};

struct gate_stats {
  std::atomic<uint64_t> admitted{0};
  std::atomic<uint64_t> refused{0};    ///< wrong frame, or closed before it was whole
  std::atomic<uint64_t> timed_out{0};  ///< no whole frame within auth_timeout
  std::atomic<uint64_t> overflow{0};   ///< closed for a newer one (max_pending were waiting)
};

class gatekeeper {
 public:
  /// Listens on host:port (0 picks one) and relays admitted connections to 127.0.0.1:inner_port.
  /// errc::io_error when the address cannot be bound; errc::invalid_argument for a bad token.
  static result<std::unique_ptr<gatekeeper>> start(const std::string& host, uint16_t port,
                                                   uint16_t inner_port, std::string_view token,
                                                   gate_limits limits = {});
  ~gatekeeper();
  gatekeeper(const gatekeeper&) = delete;
  gatekeeper& operator=(const gatekeeper&) = delete;

  uint16_t port() const noexcept;
  const gate_stats& stats() const noexcept;

  struct impl;

 private:
  explicit gatekeeper(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

class gate_tunnel {
 public:
  /// Binds 127.0.0.1:0 for one local connection; when it comes, connects to host:port within
  /// `timeout`, sends the auth frame and relays. errc::invalid_argument for a bad token,
  /// errc::io_error when the local port cannot be bound.
  static result<std::unique_ptr<gate_tunnel>> open(const std::string& host, uint16_t port,
                                                   std::string_view token,
                                                   std::chrono::milliseconds timeout);
  ~gate_tunnel();
  gate_tunnel(const gate_tunnel&) = delete;
  gate_tunnel& operator=(const gate_tunnel&) = delete;

  /// Where CAF connects: 127.0.0.1:local_port().
  uint16_t local_port() const noexcept;
  /// The gatekeeper answered the frame with a refusal (another token).
  bool refused() const noexcept;

  struct impl;

 private:
  explicit gate_tunnel(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::control
