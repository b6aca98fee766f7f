#pragma once
/// The step channel over ZeroMQ (transport.hpp), the default: a ROUTER bound on
/// tcp://host:<free port> for ranks in other processes and on an inproc:// name for ranks of
/// this process (they share its context); each rank's end is a DEALER. CAF 0.17's BASP costs
/// about three times ZeroMQ's CPU per message and each CAF message is a hand-off between
/// threads; here the engine's own threads own the sockets, so a step crosses only ZeroMQ's I/O
/// thread (docs/benchmarks.md "Step").
///
/// Both ends cap incoming messages at max_frame_bytes (ZMQ_MAXMSGSIZE: a peer that sends more is
/// disconnected by ZeroMQ before the message is read whole). Each object is used by one thread
/// at a time (ZeroMQ sockets are not thread-safe); the context is shared.
#include <memory>
#include <string>

#include "actors/channel/transport.hpp"

namespace kvc::channel {

class zmq_server final : public server_transport {
 public:
  /// Binds inproc://kvc-step-<pid>-<n> and, with a non-empty `tcp_host`, tcp://tcp_host:0.
  /// errc::io_error when a bind fails.
  static result<std::unique_ptr<zmq_server>> create(const std::string& tcp_host);
  ~zmq_server() override;

  const std::string& remote_endpoint() const noexcept override;
  result<std::unique_ptr<client_transport>> connect_local(const std::string& peer) override;
  status send(std::string_view peer, std::span<const char> bytes) override;
  result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout) override;

 private:
  struct impl;
  explicit zmq_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

/// A rank's end in another process: a DEALER connected to `endpoint` (a zmq_server's
/// remote_endpoint) with routing id `peer`. errc::io_error on failure.
result<std::unique_ptr<client_transport>> zmq_connect(const std::string& endpoint,
                                                      const std::string& peer);

}  // namespace kvc::channel
