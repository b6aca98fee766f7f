#include "launch/engines/sim/executor_channel.hpp"

#include <unistd.h>

#include <atomic>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "actors/channel/zap_handler.hpp"

namespace kvc::sim {

namespace {

using nlohmann::json;

status zmq_failure(const std::string& what, const zmq::error_t& e) {
  return make_error(errc::io_error, "executor channel: " + what + ": " + e.what());
}

}  // namespace

std::string encode(const executor_message& m) {
  json writes = json::array();
  for (const auto& w : m.input.writes) writes.push_back({w.block, w.slot, w.hash});
  json loads = json::array();
  for (const auto& l : m.input.loads) loads.push_back({l.request_id, l.blocks, l.hashes});
  const json j{{"end", m.end}, {"step", m.input.step}, {"writes", writes}, {"loads", loads}};
  const auto bytes = json::to_msgpack(j);
  return {bytes.begin(), bytes.end()};
}

result<executor_message> decode(std::string_view bytes) {
  try {
    const json j = json::from_msgpack(bytes.begin(), bytes.end());
    executor_message m;
    m.end = j.at("end").get<bool>();
    m.input.step = j.at("step").get<step_id>();
    for (const auto& w : j.at("writes")) {
      m.input.writes.push_back(
          {w.at(0).get<gpu_block>(), w.at(1).get<uint32_t>(), w.at(2).get<uint64_t>()});
    }
    for (const auto& l : j.at("loads")) {
      m.input.loads.push_back({l.at(0).get<std::string>(), l.at(1).get<std::vector<gpu_block>>(),
                               l.at(2).get<std::vector<uint64_t>>()});
    }
    return m;
  } catch (const json::exception& e) {
    return make_error(errc::protocol_mismatch,
                      std::string("executor channel: malformed message: ") + e.what());
  }
}

struct executor_publisher::impl {
  zmq::context_t ctx{1};
  std::unique_ptr<channel::zap_handler> zap;  // before the XPUB binds, destroyed after it
  zmq::socket_t sock{ctx, zmq::socket_type::xpub};
  std::string endpoint;
  uint32_t subscribers = 0;
};

executor_publisher::executor_publisher(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
executor_publisher::~executor_publisher() = default;

result<std::unique_ptr<executor_publisher>> executor_publisher::create(const std::string& host,
                                                                       uint16_t port,
                                                                       const std::string& token) {
  static std::atomic<uint32_t> counter{0};
  if (auto st = channel::check_token(token, "executor channel"); !st) return st;
  auto p = std::make_unique<impl>();
  const std::string where = "tcp://" + host + ":" + (port == 0 ? "*" : std::to_string(port));
  try {
    p->zap = std::make_unique<channel::zap_handler>(
        p->ctx, token,
        "inproc://kvc-executor-zap-stop-" + std::to_string(::getpid()) + "-" +
            std::to_string(counter++));
    p->sock.set(zmq::sockopt::xpub_verbose, 1);  // every subscription, duplicates included
    p->sock.set(zmq::sockopt::linger, 1000);
    p->sock.set(zmq::sockopt::sndhwm, 0);  // a slow worker must not lose steps
    p->sock.set(zmq::sockopt::plain_server, 1);
    p->sock.set(zmq::sockopt::zap_domain, "kvc-executor");
    p->sock.bind(where);
    p->endpoint = p->sock.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_failure("bind on " + where, e);
  }
  return std::unique_ptr<executor_publisher>{new executor_publisher(std::move(p))};
}

const std::string& executor_publisher::endpoint() const noexcept {
  return impl_->endpoint;
}

status executor_publisher::wait_for_subscribers(uint32_t subscribers,
                                                std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    while (impl_->subscribers < subscribers) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return make_error(errc::timeout, "executor channel: " + std::to_string(impl_->subscribers) +
                                             " of " + std::to_string(subscribers) +
                                             " workers subscribed");
      }
      zmq::pollitem_t item{impl_->sock.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) == 0) continue;
      zmq::message_t m;
      if (!impl_->sock.recv(m, zmq::recv_flags::dontwait)) continue;
      if (m.size() >= 1 && static_cast<const uint8_t*>(m.data())[0] == 1) ++impl_->subscribers;
    }
  } catch (const zmq::error_t& e) {
    return zmq_failure("subscriptions", e);
  }
  return status::success();
}

uint64_t executor_publisher::refused_handshakes() const noexcept {
  return impl_->zap->refused();
}

status executor_publisher::publish(const executor_message& m) {
  const std::string bytes = encode(m);
  try {
    impl_->sock.send(zmq::buffer(bytes), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    return zmq_failure("publish", e);
  }
  return status::success();
}

struct executor_subscriber::impl {
  zmq::context_t ctx{1};
  zmq::socket_t sock{ctx, zmq::socket_type::sub};
};

executor_subscriber::executor_subscriber(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
executor_subscriber::~executor_subscriber() = default;

result<std::unique_ptr<executor_subscriber>> executor_subscriber::connect(
    const std::string& endpoint, const std::string& token) {
  if (auto st = channel::check_token(token, "executor channel"); !st) return st;
  auto p = std::make_unique<impl>();
  try {
    p->sock.set(zmq::sockopt::plain_username, channel::plain_user);
    p->sock.set(zmq::sockopt::plain_password, token);
    p->sock.set(zmq::sockopt::rcvhwm, 0);
    p->sock.set(zmq::sockopt::linger, 0);
    p->sock.set(zmq::sockopt::subscribe, "");
    p->sock.connect(endpoint);
  } catch (const zmq::error_t& e) {
    return zmq_failure("connect to " + endpoint, e);
  }
  return std::unique_ptr<executor_subscriber>{new executor_subscriber(std::move(p))};
}

result<std::optional<executor_message>> executor_subscriber::receive(
    std::chrono::milliseconds timeout) {
  try {
    zmq::pollitem_t item{impl_->sock.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::optional<executor_message>{};
    zmq::message_t m;
    if (!impl_->sock.recv(m, zmq::recv_flags::dontwait)) return std::optional<executor_message>{};
    auto decoded = decode({static_cast<const char*>(m.data()), m.size()});
    if (!decoded) return decoded.error();
    return std::optional<executor_message>{std::move(decoded).value()};
  } catch (const zmq::error_t& e) {
    return zmq_failure("receive", e);
  }
}

}  // namespace kvc::sim
