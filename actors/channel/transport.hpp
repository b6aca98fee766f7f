#pragma once
/// The step channel's transports: how encoded frames (wire_codec.hpp) move between the
/// scheduler's end and the ranks' ends. The channel's logic (hello and routing, backlogs,
/// incarnations, which report is accepted) lives once, in scheduler_channel and rank_channel;
/// a transport only moves bytes. Implementations: ZeroMQ (zmq_transport.hpp: tcp for other
/// processes, inproc for ranks of the same process; the default) and memory
/// (memory_transport.hpp: in-process queues, deterministic, for tests and soaks). One contract
/// suite runs the channel over each (tests/channel/step_channel_contract_test.cpp).
///
/// A peer is a string the rank's end chose (its routing id, "r<rank>.<incarnation>"). Sends never
/// block: a peer that is gone, or a full queue, is errc::io_error. Each object is used by one
/// thread at a time.
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "actors/channel/wire_codec.hpp"
#include "proto/status.hpp"

namespace kvc::channel {

/// One frame received by the scheduler's end.
struct inbound_frame {
  std::string peer;  ///< the sender's routing id
  wire_bytes bytes;
};

/// A rank's end: one connection to the scheduler's end.
class client_transport {
 public:
  virtual ~client_transport() = default;
  virtual status send(std::span<const char> bytes) = 0;
  /// Waits up to `timeout` (zero: does not wait) for one frame; std::nullopt when none came.
  virtual result<std::optional<wire_bytes>> receive(std::chrono::milliseconds timeout) = 0;
};

/// The scheduler's end: every rank's connection, each known by its peer id.
class server_transport {
 public:
  virtual ~server_transport() = default;
  /// Where ranks of other processes connect ("tcp://127.0.0.1:40123"); empty when the
  /// transport serves this process only.
  virtual const std::string& remote_endpoint() const noexcept = 0;
  /// A connection for a rank of this process, known as `peer`.
  virtual result<std::unique_ptr<client_transport>> connect_local(const std::string& peer) = 0;
  /// errc::io_error when `peer` is not connected (any more) or its queue is full.
  virtual status send(std::string_view peer, std::span<const char> bytes) = 0;
  /// Waits up to `timeout` (zero: does not wait) for one frame; std::nullopt when none came.
  /// A malformed envelope is an error (the frame is dropped; the next call goes on).
  virtual result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout) = 0;
};

/// The routing id of a rank's connection.
std::string peer_id(rank_id rank, uint32_t incarnation);

}  // namespace kvc::channel
