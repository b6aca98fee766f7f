// The step channel's ZeroMQ port against peers that do not hold the token: a DEALER with another
// PLAIN password (spoofing a live rank's routing id), one without PLAIN sending a big message,
// and raw TCP clients (garbage, a greeting that announces a huge frame, silence). None of their
// frames may reach the scheduler's end (the channel's queue does not grow: nothing is handled or
// dropped there), each is disconnected, and the legitimate ranks complete their steps.
// Waits are for events or closed sockets, each with a deadline; nothing sleeps.
#include "actors/channel/zmq_transport.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "actors/channel/rank_channel.hpp"
#include "actors/channel/scheduler_channel.hpp"
#include "tests/support/loopback_socket.hpp"

namespace kvc::channel {
namespace {

using namespace std::chrono_literals;

constexpr auto patience = 10000ms;  // well above handshake_ivl

uint16_t port_of(const std::string& endpoint) {
  return static_cast<uint16_t>(std::stoi(endpoint.substr(endpoint.rfind(':') + 1)));
}

/// A DEALER of the test's own, with its socket monitor, to see how its handshake ended.
class probe_dealer {
 public:
  probe_dealer(const std::string& endpoint, const std::string& routing_id,
               const std::string* password)
      : sock_(ctx_, zmq::socket_type::dealer), monitor_(ctx_, zmq::socket_type::pair) {
    static int n = 0;
    const std::string mon = "inproc://probe-monitor-" + std::to_string(n++);
    sock_.set(zmq::sockopt::routing_id, routing_id);
    sock_.set(zmq::sockopt::linger, 0);
    if (password) {
      sock_.set(zmq::sockopt::plain_username, "kvc");
      sock_.set(zmq::sockopt::plain_password, *password);
    }
    if (zmq_socket_monitor(sock_.handle(), mon.c_str(), ZMQ_EVENT_ALL) != 0) throw zmq::error_t();
    monitor_.connect(mon);
    sock_.connect(endpoint);
  }

  void send(const std::vector<char>& bytes) {
    (void)sock_.send(zmq::buffer(bytes.data(), bytes.size()), zmq::send_flags::dontwait);
  }

  /// Waits for a monitor event in `mask`; false when none came within patience.
  bool wait_for(uint16_t mask) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      zmq::pollitem_t item{monitor_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, left) == 0) return false;
      zmq::message_t event;
      zmq::message_t address;
      if (!monitor_.recv(event) || !monitor_.recv(address)) return false;
      uint16_t id = 0;
      std::memcpy(&id, event.data(), sizeof id);
      if (id & mask) return true;
    }
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sock_;
  zmq::socket_t monitor_;
};

/// A plain TCP connection to 127.0.0.1:port.
class raw_client {
 public:
  explicit raw_client(uint16_t port)
      : fd_(kvc::testing::connect_loopback(port)), connected_(fd_ >= 0) {}
  ~raw_client() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }

  /// Sends what the peer takes (it may close early: the rest is not sent).
  void send(const std::vector<char>& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }

  /// Reads (and discards: the server's greeting) until the server closes the connection; false
  /// when it is still open after patience.
  bool closed_by_peer() {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    char buf[4096];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) == 0) return false;
      if (::recv(fd_, buf, sizeof buf, 0) <= 0) return true;  // EOF or reset
    }
  }

 private:
  int fd_;
  bool connected_ = false;
};

/// ZMTP 3.0 greeting (signature, version, mechanism, as-server, filler) announcing `mechanism`.
std::vector<char> zmtp_greeting(const std::string& mechanism) {
  std::vector<char> g(64, '\0');
  g[0] = '\xff';
  g[9] = '\x7f';
  g[10] = 3;
  std::memcpy(g.data() + 12, mechanism.data(), mechanism.size());
  return g;
}

class ZmqAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto z = zmq_server::create("127.0.0.1", "the-token");
    ASSERT_TRUE(z.ok()) << z.error().to_string();
    server_ = z.value().get();
    endpoint_ = server_->remote_endpoint();
    auto ch = scheduler_channel::create(std::move(z).value(), 2, "the-token");
    ASSERT_TRUE(ch.ok());
    sched_ = std::move(ch).value();
    sched_->rank_up(0, 0);
    sched_->rank_up(1, 0);
  }

  /// Both legitimate ranks connect, say hello and complete `steps` steps.
  void run_legitimate_steps(step_id steps) {
    std::vector<std::unique_ptr<rank_channel>> ranks;
    for (rank_id r = 0; r < 2; ++r) {
      auto t = zmq_connect(endpoint_, peer_id(r, 0), "the-token");
      ASSERT_TRUE(t.ok()) << t.error().to_string();
      auto rc = rank_channel::open(std::move(t).value(), {r, 0, "the-token"});
      ASSERT_TRUE(rc.ok());
      ranks.push_back(std::move(rc).value());
    }
    std::vector<step_report> reports;
    while (sched_->routed_ranks() < 2) ASSERT_GT(sched_->receive(patience, reports), 0u);
    for (step_id s = 1; s <= steps; ++s) {
      connector_metadata meta;
      meta.step = s;
      sched_->send_step(meta);
      for (rank_id r = 0; r < 2; ++r) {
        auto m = ranks[r]->next_step(patience);
        ASSERT_TRUE(m.ok() && m->has_value()) << "rank " << r << " step " << s;
        EXPECT_EQ((*m)->step, s);
        ASSERT_TRUE(ranks[r]->send_report({r, 0, s, {}}).ok());
      }
    }
    while (reports.size() < 2 * steps) ASSERT_GT(sched_->receive(patience, reports), 0u);
    EXPECT_EQ(reports.size(), 2 * steps);
    // Nothing else ever reached the scheduler's end.
    EXPECT_EQ(sched_->receive(0ms, reports), 0u);
    EXPECT_EQ(sched_->dropped_frames(), 0u) << ::testing::PrintToString(sched_->take_notes());
  }

  zmq_server* server_ = nullptr;
  std::string endpoint_;
  std::unique_ptr<scheduler_channel> sched_;
};

TEST_F(ZmqAuthTest, AWrongPasswordIsRefusedInTheHandshakeAndNoneOfItsFramesArrives) {
  const std::string wrong = "not-the-token";
  probe_dealer spoof(endpoint_, peer_id(0, 0), &wrong);  // claims the live rank 0
  spoof.send(encode(wire_hello{0, 0, "not-the-token"}));
  spoof.send(std::vector<char>(1 << 20, '\x03'));
  ASSERT_TRUE(spoof.wait_for(ZMQ_EVENT_HANDSHAKE_FAILED_AUTH));
  EXPECT_GE(server_->refused_handshakes(), 1u);  // it reconnects and is refused again
  run_legitimate_steps(50);
}

TEST_F(ZmqAuthTest, APeerWithoutPlainIsRefusedBeforeItsBigMessage) {
  probe_dealer plain_less(endpoint_, peer_id(1, 0), nullptr);  // ZeroMQ's NULL mechanism
  plain_less.send(std::vector<char>(32 << 20, 'x'));
  ASSERT_TRUE(plain_less.wait_for(ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                  ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_DISCONNECTED));
  run_legitimate_steps(50);
}

TEST_F(ZmqAuthTest, RawTcpGarbageAHugeFrameHeaderAndSilenceAreDisconnected) {
  raw_client garbage(port_of(endpoint_));
  raw_client huge(port_of(endpoint_));
  raw_client silent(port_of(endpoint_));
  ASSERT_TRUE(garbage.connected() && huge.connected() && silent.connected());
  garbage.send(std::vector<char>(1 << 20, 'G'));  // not ZMTP at all
  // A NULL-mechanism greeting, then a long frame claiming 2^62 bytes.
  std::vector<char> h = zmtp_greeting("NULL");
  const char frame_header[] = {'\x02', '\x40', 0, 0, 0, 0, 0, 0, 0};
  h.insert(h.end(), frame_header, frame_header + sizeof frame_header);
  huge.send(h);
  EXPECT_TRUE(garbage.closed_by_peer());
  EXPECT_TRUE(huge.closed_by_peer());
  EXPECT_TRUE(silent.closed_by_peer());  // after handshake_ivl
  run_legitimate_steps(50);
}

TEST_F(ZmqAuthTest, APlainHandshakeWithAWrongPasswordByHandIsClosed) {
  // A hand-written PLAIN HELLO command (ZMTP 3.0, RFC 24): the password is one byte off.
  raw_client c(port_of(endpoint_));
  ASSERT_TRUE(c.connected());
  std::vector<char> bytes = zmtp_greeting("PLAIN");
  const std::string user = "kvc";
  const std::string pass = "the-tokem";
  std::string body = std::string("\x05HELLO", 6) + static_cast<char>(user.size()) + user +
                     static_cast<char>(pass.size()) + pass;
  bytes.push_back('\x04');  // a short command
  bytes.push_back(static_cast<char>(body.size()));
  bytes.insert(bytes.end(), body.begin(), body.end());
  c.send(bytes);
  EXPECT_TRUE(c.closed_by_peer());
  EXPECT_EQ(server_->refused_handshakes(), 1u);
  run_legitimate_steps(20);
}

TEST(ZmqAuth, ABadTokenIsRefusedAtCreation) {
  EXPECT_EQ(zmq_server::create("127.0.0.1", "").error().code(), errc::invalid_argument);
  EXPECT_EQ(zmq_server::create("127.0.0.1", std::string(256, 't')).error().code(),
            errc::invalid_argument);
  EXPECT_EQ(zmq_connect("tcp://127.0.0.1:1", "r0.0", "").error().code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::channel
