#pragma once
/// publisher: vLLM's KV-event publisher (ZmqEventPublisher) for our CPU tier. Every batch goes
/// out on a ZeroMQ PUB socket as one message of three frames: topic, sequence number (8 bytes,
/// big-endian, from 0), payload (batch_encoder's msgpack). The last `buffer` batches are kept;
/// with a replay endpoint, a ROUTER socket answers a request [empty, start seq (8 bytes
/// big-endian)] from a DEALER/REQ with one [empty, seq, payload] per kept batch with
/// seq >= start, then [empty, -1 (8 bytes 0xff), empty] (vLLM's end marker). A malformed request
/// gets only the end marker. The ROUTER's send high-water mark is `buffer` + 1 messages, so one
/// whole answer fits a peer's queue however slowly it reads; a peer that asks again before it
/// read an earlier answer, or that went away, gets what fits and no end marker (a warning says
/// where the answer was cut), and the PUB socket never waits for it.
///
/// Threads: the sockets live on a thread of the publisher's own; publish() hands the encoded
/// batch over an inproc PUSH/PULL pair (a copy, no lock), so the engine's thread never waits on
/// a subscriber. The PUB socket drops batches for a subscriber past its high-water mark
/// (100,000, vLLM's), as vLLM's does; the replay buffer is what a subscriber recovers them from.
///
/// publish() and the destructor belong to the thread that called start() (it owns the PUSH
/// end); published() may be read from any thread.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "proto/status.hpp"

namespace kvc::kv_events {

struct publisher_options {
  std::string endpoint;         ///< PUB bind address, e.g. "tcp://*:5557"
  std::string replay_endpoint;  ///< ROUTER bind address; empty: no replay
  std::string topic;
  size_t buffer = 10000;  ///< batches kept for replay (>= 1)
  int high_water_mark = 100000;
};

class publisher {
 public:
  /// Binds the sockets (errc::io_error naming the endpoint when one cannot be bound,
  /// errc::invalid_argument for a buffer of 0) and starts the thread.
  static result<std::unique_ptr<publisher>> start(const publisher_options& o);
  /// Stops the thread after it sent everything handed to it; closes the sockets.
  ~publisher();
  publisher(const publisher&) = delete;
  publisher& operator=(const publisher&) = delete;

  /// Hands one encoded batch (non-empty) to the publishing thread; it gets the next sequence
  /// number there.
  void publish(std::string payload);
  /// Batches sent on the PUB socket so far.
  uint64_t published() const noexcept { return published_->load(std::memory_order_relaxed); }
  /// The PUB socket's bound address (ZMQ_LAST_ENDPOINT: the real port when bound to port 0 or *).
  const std::string& endpoint() const noexcept { return endpoint_; }
  const std::string& replay_endpoint() const noexcept { return replay_endpoint_; }

 private:
  publisher() = default;

  zmq::context_t ctx_{1};
  zmq::socket_t push_;
  std::thread thread_;
  std::shared_ptr<std::atomic<uint64_t>> published_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::string endpoint_;
  std::string replay_endpoint_;
};

}  // namespace kvc::kv_events
