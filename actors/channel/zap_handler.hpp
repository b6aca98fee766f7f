#pragma once
/// zap_handler: ZeroMQ's authentication handler (ZAP, RFC 27) for one context, shared by every
/// ZeroMQ socket of the project that admits peers of other processes (the step channel's
/// ROUTER, the simulated engine's executor channel): it admits a PLAIN handshake whose user is
/// plain_user and whose password is the deployment's token (constant-time compare) and refuses
/// every other. A refused peer is disconnected by ZeroMQ during the handshake: none of its
/// frames (nor, on an XPUB, its subscriptions) reaches the socket.
///
/// Ownership: borrows the context (which must outlive it). Its thread serves the context's
/// inproc://zeromq.zap.01 until the object is destroyed; create it before the socket binds so
/// that no handshake goes unanswered. refused() may be read from any thread.
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>

#include <zmq.hpp>

#include "proto/status.hpp"

namespace kvc::channel {

/// The PLAIN user name every peer presents; the password is the token.
inline constexpr const char* plain_user = "kvc";

/// errc::invalid_argument unless `token` is 1 to 255 bytes (a ZeroMQ PLAIN password); `what`
/// names the channel in the message.
status check_token(const std::string& token, std::string_view what);

/// Equal strings, in a time that depends on their lengths only.
bool same_secret(std::string_view a, std::string_view b) noexcept;

class zap_handler {
 public:
  /// `stop_endpoint`: an inproc name unique in the context (ends the thread).
  zap_handler(zmq::context_t& ctx, std::string token, const std::string& stop_endpoint);
  ~zap_handler();
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;

  /// Handshakes refused so far.
  uint64_t refused() const noexcept { return refused_.load(); }

 private:
  void serve();
  void answer_one();

  const std::string token_;
  zmq::socket_t zap_;
  zmq::socket_t stop_tx_;
  zmq::socket_t stop_rx_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
};

}  // namespace kvc::channel
