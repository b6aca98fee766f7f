#pragma once
/// replay_client: fetches missed KV-event batches from a publisher's replay (ROUTER) endpoint,
/// ours or vLLM's: sends [empty, start seq (8 bytes big-endian)] from a DEALER and reads
/// [empty, seq, payload] messages until the end marker (seq -1, empty payload).
///
/// Every wait has a bound: when no message of the answer arrives within `timeout` (a publisher
/// that is gone, or an answer cut short with no end marker) the fetch fails with errc::timeout;
/// when `stop_fd` becomes readable (e.g. signal_watcher's) it returns stopped at once. Uses the
/// caller's ZeroMQ context; not thread-safe: one fetch at a time per context user.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <zmq.hpp>

#include "proto/status.hpp"

namespace kvc::kv_events {

struct replay_request {
  std::string endpoint;                     ///< the publisher's ROUTER endpoint
  uint64_t from = 0;                        ///< the first sequence number wanted
  std::chrono::milliseconds timeout{5000};  ///< the longest wait for each message of the answer
  int stop_fd = -1;                         ///< readable: stop waiting; -1: none
};

enum class replay_outcome : uint8_t {
  complete,  ///< the end marker arrived
  stopped,   ///< stop_fd became readable first
};

/// Calls `on_batch(seq, payload)` for every batch of the answer, in the order received.
/// errc::timeout when no message came within `timeout`; errc::invalid_argument for a message
/// that is not [empty, 8-byte seq, payload]; errc::io_error when the endpoint is not one ZeroMQ
/// can connect to.
result<replay_outcome> fetch_replay(
    zmq::context_t& ctx, const replay_request& r,
    const std::function<void(uint64_t seq, std::string_view payload)>& on_batch);

}  // namespace kvc::kv_events
