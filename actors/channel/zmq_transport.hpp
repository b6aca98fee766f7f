#pragma once
/// The step channel over ZeroMQ (transport.hpp), the default: a ROUTER bound on
/// tcp://host:<free port> for ranks in other processes and on an inproc:// name for ranks of
/// this process (they share its context); each rank's end is a DEALER. CAF 0.17's BASP costs
/// about three times ZeroMQ's CPU per message and each CAF message is a hand-off between
/// threads; here the engine's own threads own the sockets, so a step crosses only ZeroMQ's I/O
/// thread (docs/benchmarks.md "Step").
///
/// Authentication happens in ZeroMQ's own handshake, before any frame is delivered: the ROUTER
/// is a PLAIN server and a ZAP handler (a thread of the server, on inproc://zeromq.zap.01 of its
/// context) admits a peer only when its PLAIN password is the deployment's token (constant-time
/// compare); a peer without it is disconnected by ZeroMQ during the handshake and none of its
/// frames reaches the ROUTER's queue. An unauthenticated peer therefore costs one connection for
/// at most handshake_ivl and ZeroMQ's handshake buffers; the scheduler_channel's hello check stays
/// (the memory transport has no handshake). Connections of this process (inproc) skip ZMTP.
///
/// Both ends cap incoming messages at max_frame_bytes (ZMQ_MAXMSGSIZE: a peer that sends more is
/// disconnected by ZeroMQ before the message is read whole) and queue at most receive_hwm
/// messages per peer (ZMQ_RCVHWM). Each object is used by one thread at a time (ZeroMQ sockets
/// are not thread-safe); the context is shared; the ZAP thread owns only its own sockets.
#include <chrono>
#include <memory>
#include <string>

#include "actors/channel/transport.hpp"

namespace kvc::channel {

/// How long an unauthenticated tcp peer may take to complete ZeroMQ's handshake.
inline constexpr std::chrono::milliseconds handshake_ivl{2000};
/// Messages queued per peer at either end (ZMQ_RCVHWM); more wait in the peer's own queue.
inline constexpr int receive_hwm = 4096;

class zmq_server final : public server_transport {
 public:
  /// Binds inproc://kvc-step-<pid>-<n> and, with a non-empty `tcp_host`, tcp://tcp_host:0;
  /// tcp peers must present `token` (1 to 255 bytes) as their PLAIN password.
  /// errc::invalid_argument for a bad token; errc::io_error when a bind fails.
  static result<std::unique_ptr<zmq_server>> create(const std::string& tcp_host,
                                                    const std::string& token);
  ~zmq_server() override;

  const std::string& remote_endpoint() const noexcept override;
  result<std::unique_ptr<client_transport>> connect_local(const std::string& peer) override;
  status send(std::string_view peer, std::span<const char> bytes) override;
  result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout) override;

  /// tcp handshakes refused since the start (no PLAIN, or another password). Thread-safe.
  uint64_t refused_handshakes() const noexcept;

 private:
  struct impl;
  explicit zmq_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// A rank's end in another process: a DEALER connected to `endpoint` (a zmq_server's
/// remote_endpoint) with routing id `peer`, presenting `token` in ZeroMQ's PLAIN handshake.
/// errc::invalid_argument for a bad token; errc::io_error on failure. A wrong token is not seen
/// here: the server closes the handshake and the messages sent never arrive.
result<std::unique_ptr<client_transport>> zmq_connect(const std::string& endpoint,
                                                      const std::string& peer,
                                                      const std::string& token);

}  // namespace kvc::channel
