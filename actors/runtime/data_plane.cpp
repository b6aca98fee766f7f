#include "actors/runtime/data_plane.hpp"

#include <unistd.h>

#include <atomic>
#include <utility>

#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace kvc::runtime {

struct data_plane_context {
  zmq::context_t ctx{1};
};

std::shared_ptr<data_plane_context> make_data_plane_context() {
  return std::make_shared<data_plane_context>();
}

namespace {

status zmq_error(const std::string& what, const zmq::error_t& e) {
  return make_error(errc::io_error, "data plane: " + what + ": " + e.what());
}

/// Waits up to `timeout` until `sock` has a message to read.
bool readable(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, timeout) > 0;
}

wire_bytes to_bytes(const zmq::message_t& m) {
  const auto* p = static_cast<const char*>(m.data());
  return wire_bytes(p, p + m.size());
}

}  // namespace

// --- server ---

struct data_plane_server::impl {
  std::shared_ptr<data_plane_context> ctx = make_data_plane_context();
  zmq::socket_t sock{ctx->ctx, zmq::socket_type::router};
  std::string tcp;
  std::string inproc;
};

data_plane_server::data_plane_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
data_plane_server::~data_plane_server() = default;

result<std::unique_ptr<data_plane_server>> data_plane_server::create(const std::string& tcp_host) {
  static std::atomic<uint32_t> counter{0};
  auto p = std::make_unique<impl>();
  try {
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.set(zmq::sockopt::router_mandatory, 1);  // unknown peer: EHOSTUNREACH, not a drop
    p->inproc = "inproc://kvc-data-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    p->sock.bind(p->inproc);
    if (!tcp_host.empty()) {
      p->sock.bind("tcp://" + tcp_host + ":0");
      p->tcp = p->sock.get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot bind on " + (tcp_host.empty() ? p->inproc : tcp_host), e);
  }
  return std::unique_ptr<data_plane_server>{new data_plane_server(std::move(p))};
}

const std::string& data_plane_server::tcp_endpoint() const noexcept {
  return impl_->tcp;
}

const std::string& data_plane_server::inproc_endpoint() const noexcept {
  return impl_->inproc;
}

std::shared_ptr<data_plane_context> data_plane_server::context() const noexcept {
  return impl_->ctx;
}

status data_plane_server::send(std::string_view peer, std::span<const char> bytes) {
  try {
    if (!impl_->sock.send(zmq::buffer(peer.data(), peer.size()),
                          zmq::send_flags::sndmore | zmq::send_flags::dontwait) ||
        !impl_->sock.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
      return make_error(errc::io_error, "data plane: the queue to a worker is full");
    }
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot send to a worker", e);
  }
  return {};
}

result<std::optional<inbound_frame>> data_plane_server::receive(std::chrono::milliseconds timeout) {
  try {
    if (!readable(impl_->sock, timeout)) return std::optional<inbound_frame>{};
    std::vector<zmq::message_t> parts;
    if (!zmq::recv_multipart(impl_->sock, std::back_inserter(parts), zmq::recv_flags::dontwait)) {
      return std::optional<inbound_frame>{};
    }
    if (parts.size() != 2) {
      return make_error(errc::protocol_mismatch, "data plane: a message of " +
                                                     std::to_string(parts.size()) +
                                                     " frames (want routing id + payload)");
    }
    return std::optional<inbound_frame>{inbound_frame{parts[0].to_string(), to_bytes(parts[1])}};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot receive", e);
  }
}

// --- client ---

struct data_plane_client::impl {
  std::shared_ptr<data_plane_context> ctx;
  std::optional<zmq::socket_t> sock;
};

data_plane_client::data_plane_client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
data_plane_client::~data_plane_client() = default;

result<std::unique_ptr<data_plane_client>> data_plane_client::create(
    std::shared_ptr<data_plane_context> ctx, const std::string& endpoint, const wire_hello& hello) {
  auto p = std::make_unique<impl>();
  p->ctx = ctx ? std::move(ctx) : make_data_plane_context();
  try {
    p->sock.emplace(p->ctx->ctx, zmq::socket_type::dealer);
    p->sock->set(zmq::sockopt::routing_id, "r" + std::to_string(hello.rank) + "." +
                                               std::to_string(hello.incarnation));
    // Reports still queued when the worker ends get a second to leave.
    p->sock->set(zmq::sockopt::linger, 1000);
    p->sock->connect(endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot connect to " + endpoint, e);
  }
  std::unique_ptr<data_plane_client> c{new data_plane_client(std::move(p))};
  const wire_bytes h = encode(hello);
  if (auto st = c->send(h); !st) return st;
  return c;
}

status data_plane_client::send(std::span<const char> bytes) {
  try {
    if (!impl_->sock->send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait)) {
      return make_error(errc::io_error, "data plane: the queue to the scheduler is full");
    }
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot send to the scheduler", e);
  }
  return {};
}

result<std::optional<wire_bytes>> data_plane_client::receive(std::chrono::milliseconds timeout) {
  try {
    if (!readable(*impl_->sock, timeout)) return std::optional<wire_bytes>{};
    zmq::message_t m;
    if (!impl_->sock->recv(m, zmq::recv_flags::dontwait)) return std::optional<wire_bytes>{};
    return std::optional<wire_bytes>{to_bytes(m)};
  } catch (const zmq::error_t& e) {
    return zmq_error("cannot receive", e);
  }
}

}  // namespace kvc::runtime
