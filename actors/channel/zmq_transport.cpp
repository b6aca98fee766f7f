#include "actors/channel/zmq_transport.hpp"

#include "actors/channel/zap_handler.hpp"

#include <unistd.h>

#include <atomic>
#include <iterator>
#include <utility>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace kvc::channel {

namespace {

status zmq_error(const std::string& what, const zmq::error_t& e) {
  return make_error(errc::io_error, "step channel: " + what + ": " + e.what());
}

/// Waits up to `timeout` until `sock` has a message to read.
bool readable(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, timeout) > 0;
}

/// Sets the options both ends share: the largest message, the queue bound, the handshake's
/// deadline.
void bound(zmq::socket_t& sock) {
  sock.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(max_frame_bytes));
  sock.set(zmq::sockopt::rcvhwm, receive_hwm);
  sock.set(zmq::sockopt::handshake_ivl, static_cast<int>(handshake_ivl.count()));
}

wire_bytes to_bytes(const zmq::message_t& m) {
  const auto* p = static_cast<const char*>(m.data());
  return wire_bytes(p, p + m.size());
}

/// A DEALER with routing id `peer` on `ctx`, connected to `endpoint`.
class zmq_client final : public client_transport {
 public:
  zmq_client(std::shared_ptr<zmq::context_t> ctx, const std::string& endpoint,
             const std::string& peer, const std::string& token)
      : ctx_(std::move(ctx)), sock_(*ctx_, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::routing_id, peer);
    sock_.set(zmq::sockopt::plain_username, plain_user);
    sock_.set(zmq::sockopt::plain_password, token);
    bound(sock_);
    // Reports still queued when the rank ends get a second to leave.
    sock_.set(zmq::sockopt::linger, 1000);
    sock_.connect(endpoint);
  }

  status send(std::span<const char> bytes) override {
    try {
      if (!sock_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
        return make_error(errc::io_error, "step channel: the queue to the scheduler is full");
      }
    } catch (const zmq::error_t& e) {
      return zmq_error("cannot send to the scheduler", e);
    }
    return {};
  }

  result<std::optional<wire_bytes>> receive(std::chrono::milliseconds timeout) override {
    try {
      if (!readable(sock_, timeout)) return std::optional<wire_bytes>{};
      zmq::message_t m;
      if (!sock_.recv(m, zmq::recv_flags::dontwait)) return std::optional<wire_bytes>{};
      return std::optional<wire_bytes>{to_bytes(m)};
    } catch (const zmq::error_t& e) {
      return zmq_error("cannot receive", e);
    }
  }

 private:
  std::shared_ptr<zmq::context_t> ctx_;  // outlives the socket
  zmq::socket_t sock_;
};

}  // namespace

struct zmq_server::impl {
  std::shared_ptr<zmq::context_t> ctx = std::make_shared<zmq::context_t>(1);
  std::string token;
  std::unique_ptr<zap_handler> zap;  // outlives the ROUTER: no handshake goes unanswered
  zmq::socket_t sock{*ctx, zmq::socket_type::router};
  std::string tcp;
  std::string inproc;
};

zmq_server::zmq_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
zmq_server::~zmq_server() = default;

result<std::unique_ptr<zmq_server>> zmq_server::create(const std::string& tcp_host,
                                                       const std::string& token) {
  static std::atomic<uint32_t> counter{0};
  if (auto st = check_token(token, "step channel"); !st) return st;
  auto p = std::make_unique<impl>();
  p->token = token;
  try {
    const std::string name = std::to_string(::getpid()) + "-" + std::to_string(counter++);
    p->zap = std::make_unique<zap_handler>(*p->ctx, token, "inproc://kvc-zap-stop-" + name);
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.set(zmq::sockopt::router_mandatory, 1);  // unknown peer: EHOSTUNREACH, not a drop
    p->sock.set(zmq::sockopt::plain_server, 1);
    p->sock.set(zmq::sockopt::zap_domain, "kvc-step");
    bound(p->sock);
    p->inproc = "inproc://kvc-step-" + name;
    p->sock.bind(p->inproc);
    if (!tcp_host.empty()) {
      p->sock.bind("tcp://" + tcp_host + ":0");
      p->tcp = p->sock.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot bind on " + (tcp_host.empty() ? p->inproc : tcp_host), e);
  }
  return std::unique_ptr<zmq_server>{new zmq_server(std::move(p))};
}

const std::string& zmq_server::remote_endpoint() const noexcept {
  return impl_->tcp;
}

result<std::unique_ptr<client_transport>> zmq_server::connect_local(const std::string& peer) {
  try {
    return std::unique_ptr<client_transport>{
        new zmq_client(impl_->ctx, impl_->inproc, peer, impl_->token)};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot connect to " + impl_->inproc, e);
  }
}

status zmq_server::send(std::string_view peer, std::span<const char> bytes) {
  try {
    if (!impl_->sock.send(zmq::buffer(peer.data(), peer.size()),
                          zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !impl_->sock.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
      return make_error(errc::io_error, "step channel: the queue to a rank is full");
    }
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot send to a rank", e);
  }
  return {};
}

result<std::optional<inbound_frame>> zmq_server::receive(std::chrono::milliseconds timeout) {
  try {
    if (!readable(impl_->sock, timeout)) return std::optional<inbound_frame>{};
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(impl_->sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
      return std::optional<inbound_frame>{};
    }
    if (parts.size() != 2) {
      return make_error(errc::protocol_mismatch, "step channel: a message of " +
                                                     std::to_string(parts.size()) +
                                                     " frames (want routing id + payload)");
    }
    return std::optional<inbound_frame>{inbound_frame{parts[0].to_string(), to_bytes(parts[1])}};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot receive", e);
  }
}

uint64_t zmq_server::refused_handshakes() const noexcept {
  return impl_->zap->refused();
}

result<std::unique_ptr<client_transport>> zmq_connect(const std::string& endpoint,
                                                      const std::string& peer,
                                                      const std::string& token) {
  if (auto st = check_token(token, "step channel"); !st) return st;
  try {
    return std::unique_ptr<client_transport>{
        new zmq_client(std::make_shared<zmq::context_t>(1), endpoint, peer, token)};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot connect to " + endpoint, e);
  }
}

}  // namespace kvc::channel
