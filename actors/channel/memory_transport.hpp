#pragma once
/// The step channel over in-process queues (transport.hpp): no sockets, no I/O thread. A frame
/// sent is in the receiver's queue when send returns, so a test or a soak that drives the
/// scheduler's end and the ranks' ends from one thread is deterministic: receive finds exactly
/// what was sent before it, in order. Serves ranks of this process only (remote_endpoint is
/// empty).
///
/// Queues are guarded by one mutex, so the ends may also live on different threads (receive
/// then waits on a condition variable up to its timeout). A rank's end that is destroyed is
/// disconnected: the server's sends to it fail with errc::io_error, as ZeroMQ's do.
#include <memory>
#include <string>

#include "actors/channel/transport.hpp"

namespace kvc::channel {

class memory_server final : public server_transport {
 public:
  memory_server();
  ~memory_server() override;

  const std::string& remote_endpoint() const noexcept override;
  /// errc::invalid_argument when `peer` is connected already.
  result<std::unique_ptr<client_transport>> connect_local(const std::string& peer) override;
  status send(std::string_view peer, std::span<const char> bytes) override;
  result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout) override;

  struct hub;  // the queues, shared with the ranks' ends

 private:
  std::shared_ptr<hub> hub_;
};

}  // namespace kvc::channel
