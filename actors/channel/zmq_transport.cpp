#include "actors/channel/zmq_transport.hpp"

#include <unistd.h>

#include <atomic>
#include <iterator>
#include <thread>
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

/// The PLAIN user name every rank presents; the password is the token.
constexpr const char* plain_user = "kvc";

status check_token(const std::string& token) {
  if (token.empty() || token.size() > 255) {
    return make_error(errc::invalid_argument,
                      "step channel: the token must be 1 to 255 bytes (ZeroMQ PLAIN password)");
  }
  return {};
}

/// Equal strings, in a time that depends on their lengths only.
bool same_secret(std::string_view a, std::string_view b) noexcept {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < b.size(); ++i) {
    const char x = i < a.size() ? a[i] : '\0';
    diff |= static_cast<unsigned char>(x ^ b[i]);
  }
  return diff == 0;
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

/// ZeroMQ's authentication handler (ZAP, RFC 27) for one context: admits a PLAIN handshake
/// whose password is the token, refuses every other. Its thread serves the ZAP socket until the
/// object is destroyed (a message on the stop pair ends it).
class zap_handler {
 public:
  zap_handler(zmq::context_t& ctx, std::string token, const std::string& stop_endpoint)
      : token_(std::move(token)),
        zap_(ctx, zmq::socket_type::rep),
        stop_tx_(ctx, zmq::socket_type::pair),
        stop_rx_(ctx, zmq::socket_type::pair) {
    zap_.set(zmq::sockopt::linger, 0);
    zap_.bind("inproc://zeromq.zap.01");  // before the ROUTER binds: no handshake goes unserved
    stop_tx_.bind(stop_endpoint);
    stop_rx_.connect(stop_endpoint);
    thread_ = std::thread([this] { serve(); });
  }
  ~zap_handler() {
    stop_tx_.send(zmq::str_buffer("stop"), zmq::send_flags::none);
    thread_.join();
  }
  zap_handler(const zap_handler&) = delete;
  zap_handler& operator=(const zap_handler&) = delete;

  uint64_t refused() const noexcept { return refused_.load(); }

 private:
  void serve() {
    for (;;) {
      zmq::pollitem_t items[] = {{zap_.handle(), 0, ZMQ_POLLIN, 0},
                                 {stop_rx_.handle(), 0, ZMQ_POLLIN, 0}};
      try {
        zmq::poll(items, 2, std::chrono::milliseconds{-1});
        if (items[1].revents & ZMQ_POLLIN) return;
        if (items[0].revents & ZMQ_POLLIN) answer_one();
      } catch (const zmq::error_t&) {
        return;  // the context is ending
      }
    }
  }

  /// Request: version, request id, domain, address, routing id, mechanism, credentials...
  /// Reply: version, request id, status code, status text, user id, metadata.
  void answer_one() {
    std::vector<zmq::message_t> req;
    if (!zmq::recv_multipart(zap_, std::back_inserter(req))) return;
    const bool admit = req.size() == 8 && req[0].to_string_view() == "1.0" &&
                       req[5].to_string_view() == "PLAIN" &&
                       req[6].to_string_view() == plain_user &&
                       same_secret(req[7].to_string_view(), token_);
    if (!admit) refused_.fetch_add(1);
    const std::string id = req.size() > 1 ? req[1].to_string() : std::string{};
    std::vector<zmq::const_buffer> reply = {
        zmq::str_buffer("1.0"), zmq::buffer(id),
        admit ? zmq::str_buffer("200") : zmq::str_buffer("400"),
        admit ? zmq::str_buffer("OK") : zmq::str_buffer("not the deployment's token"),
        zmq::str_buffer(""), zmq::str_buffer("")};
    zmq::send_multipart(zap_, reply);
  }

  const std::string token_;
  zmq::socket_t zap_;
  zmq::socket_t stop_tx_;
  zmq::socket_t stop_rx_;
  std::atomic<uint64_t> refused_{0};
  std::thread thread_;
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
  if (auto st = check_token(token); !st) return st;
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
  if (auto st = check_token(token); !st) return st;
  try {
    return std::unique_ptr<client_transport>{
        new zmq_client(std::make_shared<zmq::context_t>(1), endpoint, peer, token)};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot connect to " + endpoint, e);
  }
}

}  // namespace kvc::channel
