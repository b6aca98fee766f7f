#pragma once
/// The ZeroMQ data plane: the per-step messages between the engine's scheduler thread and the
/// ranks' worker threads (one connector_metadata out to every rank, one step_report back from
/// each), while CAF keeps registration, supervision and stop (docs/architecture.md "Data
/// plane"). CAF 0.17's BASP costs about three times ZeroMQ's CPU per message, and each message
/// is a hand-off between threads; here the engine's threads own the sockets, so a step crosses
/// only ZeroMQ's own I/O threads.
///
/// data_plane_server: a ROUTER bound on tcp://host:<free port> (worker processes) and on an
/// inproc:// name (workers of the same process, which share its context). A peer is known by
/// its ZeroMQ routing id; the caller maps ranks to peers from their hello frames.
/// data_plane_client: a DEALER that connects to one of those endpoints and says hello.
///
/// Frames are wire_codec bytes. Sends never block: a peer that is gone (or a full queue) is an
/// errc::io_error. Each object is used by one thread at a time (ZeroMQ sockets are not
/// thread-safe); the context may be shared.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/runtime/wire_codec.hpp"
#include "proto/status.hpp"

namespace kvc::runtime {

/// A ZeroMQ context (one I/O thread), shared by a server and its in-process clients.
struct data_plane_context;
std::shared_ptr<data_plane_context> make_data_plane_context();

/// One message received by the server.
struct inbound_frame {
  std::string peer;  ///< the sender's routing id
  wire_bytes bytes;
};

class data_plane_server {
 public:
  /// Binds inproc://kvc-data-<pid>-<n> and, with a non-empty `tcp_host`, tcp://tcp_host:0.
  /// errc::io_error when a bind fails.
  static result<std::unique_ptr<data_plane_server>> create(const std::string& tcp_host);
  ~data_plane_server();

  /// "tcp://127.0.0.1:40123"; empty without tcp.
  const std::string& tcp_endpoint() const noexcept;
  const std::string& inproc_endpoint() const noexcept;
  /// The context in-process clients must use for inproc_endpoint().
  std::shared_ptr<data_plane_context> context() const noexcept;

  /// Sends one frame to `peer`; errc::io_error when the peer is not connected (any more).
  status send(std::string_view peer, std::span<const char> bytes);
  /// Waits up to `timeout` (zero: does not wait) for one frame. std::nullopt when none came.
  result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout);

 private:
  struct impl;
  explicit data_plane_server(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

class data_plane_client {
 public:
  /// Connects a DEALER to `endpoint` with routing id "r<rank>.<incarnation>" and sends the hello
  /// frame. `ctx` null: a context of its own (tcp endpoints). errc::io_error on failure.
  static result<std::unique_ptr<data_plane_client>> create(std::shared_ptr<data_plane_context> ctx,
                                                           const std::string& endpoint,
                                                           const wire_hello& hello);
  ~data_plane_client();

  status send(std::span<const char> bytes);
  /// Waits up to `timeout` (zero: does not wait) for one frame. std::nullopt when none came.
  result<std::optional<wire_bytes>> receive(std::chrono::milliseconds timeout);

 private:
  struct impl;
  explicit data_plane_client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::runtime
