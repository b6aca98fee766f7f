// The control plane's gate: the auth frame, the gatekeeper in front of a stand-in for CAF's port
// (a plain listening socket of the test), and the tunnel a worker's CAF connects through. Every
// wait is for a socket event with a deadline that only a broken run reaches.
#include "actors/control/gate.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "actors/control/tcp_probe.hpp"

namespace kvc::control {
namespace {

using namespace std::chrono_literals;

constexpr int patience_ms = 10000;

struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

/// A listening socket on 127.0.0.1:0 standing for CAF's loopback port.
struct inner_server {
  fd_guard listener;
  uint16_t port = 0;
  inner_server() {
    listener.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener.fd, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  /// The next connection the gate relays here, waiting up to the patience.
  int accept_one() {
    pollfd p{listener.fd, POLLIN, 0};
    if (::poll(&p, 1, patience_ms) != 1) return -1;
    return ::accept(listener.fd, nullptr, nullptr);
  }
};

int connect_to(uint16_t port) {
  auto fd = connect_tcp("127.0.0.1", port, 5s);
  EXPECT_TRUE(fd.ok()) << fd.error().to_string();
  return fd ? *fd : -1;
}

bool send_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    pollfd w{fd, POLLOUT, 0};
    if (::poll(&w, 1, patience_ms) != 1) return false;
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno != EAGAIN) return false;
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    }
  }
  return true;
}

/// Exactly `n` bytes, or what came before the peer closed.
std::string read_n(int fd, size_t n) {
  std::string out;
  while (out.size() < n) {
    pollfd r{fd, POLLIN, 0};
    if (::poll(&r, 1, patience_ms) != 1) break;
    char buf[256];
    const ssize_t k = ::read(fd, buf, std::min(sizeof buf, n - out.size()));
    if (k < 0 && errno == EAGAIN) continue;
    if (k <= 0) break;
    out.append(buf, static_cast<size_t>(k));
  }
  return out;
}

/// The peer closed the connection (read returns 0 or an error) within the patience.
bool closed_by_peer(int fd) {
  for (;;) {
    pollfd r{fd, POLLIN, 0};
    if (::poll(&r, 1, patience_ms) != 1) return false;
    char buf[64];
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k == 0 || (k < 0 && errno != EAGAIN)) return true;
  }
}

TEST(AuthFrameTest, CarriesTheTokenAndChecksItExactly) {
  auto f = make_auth_frame("secret");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(check_auth_frame(*f, "secret"));
  EXPECT_FALSE(check_auth_frame(*f, "secreT"));
  EXPECT_FALSE(check_auth_frame(*f, "secret2"));
  EXPECT_FALSE(check_auth_frame(*f, ""));
  auth_frame basp{};  // a CAF BASP header claiming a huge payload
  const unsigned char header[] = {1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 3};
  std::memcpy(basp.data(), header, sizeof header);
  EXPECT_FALSE(check_auth_frame(basp, "secret"));
  EXPECT_EQ(make_auth_frame("").code(), errc::invalid_argument);
  EXPECT_EQ(make_auth_frame(std::string(max_token_bytes + 1, 'x')).code(), errc::invalid_argument);
  EXPECT_TRUE(make_auth_frame(std::string(max_token_bytes, 'x')).ok());
}

TEST(AuthReaderTest, JudgesAFrameInPiecesAndNeverTakesTheBytesAfterIt) {
  const auto f = *make_auth_frame("secret");
  std::string bytes(f.begin(), f.end());
  bytes += "BASP";  // the relay's, not the reader's
  auth_reader r;
  size_t taken = 0;
  EXPECT_EQ(r.feed({bytes.data(), 1}, "secret", taken), auth_reader::verdict::incomplete);
  EXPECT_EQ(taken, 1u);
  EXPECT_EQ(r.feed({bytes.data() + 1, 40}, "secret", taken), auth_reader::verdict::incomplete);
  EXPECT_EQ(r.missing(), auth_frame_bytes - 41);
  EXPECT_EQ(r.feed({bytes.data() + 41, bytes.size() - 41}, "secret", taken),
            auth_reader::verdict::admitted);
  EXPECT_EQ(taken, auth_frame_bytes - 41);
  EXPECT_EQ(r.feed({bytes.data(), bytes.size()}, "secret", taken), auth_reader::verdict::admitted);
  EXPECT_EQ(taken, 0u);

  auth_reader wrong;
  std::vector<char> basp(auth_frame_bytes + 100, '\xff');
  EXPECT_EQ(wrong.feed({basp.data(), basp.size()}, "secret", taken),
            auth_reader::verdict::refused);
  EXPECT_EQ(taken, auth_frame_bytes);
  EXPECT_EQ(wrong.feed({}, "secret", taken), auth_reader::verdict::refused);
}

TEST(GatekeeperTest, AnAdmittedConnectionIsRelayedBothWays) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret");
  ASSERT_TRUE(gate.ok()) << gate.error().to_string();
  fd_guard c{connect_to((*gate)->port())};
  const auto frame = *make_auth_frame("secret");
  ASSERT_TRUE(send_all(c.fd, frame.data(), frame.size()));
  EXPECT_EQ(read_n(c.fd, 1), "Y");
  fd_guard in{caf.accept_one()};
  ASSERT_GE(in.fd, 0);
  ASSERT_TRUE(send_all(c.fd, "hello", 5));
  EXPECT_EQ(read_n(in.fd, 5), "hello");  // the frame itself is not passed on
  ASSERT_TRUE(send_all(in.fd, "world!", 6));
  EXPECT_EQ(read_n(c.fd, 6), "world!");
  EXPECT_EQ((*gate)->stats().admitted.load(), 1u);
}

TEST(GatekeeperTest, AWrongTokenIsRefusedAndNothingReachesTheInnerPort) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret");
  ASSERT_TRUE(gate.ok());
  fd_guard c{connect_to((*gate)->port())};
  const auto frame = *make_auth_frame("guess");
  ASSERT_TRUE(send_all(c.fd, frame.data(), frame.size()));
  EXPECT_EQ(read_n(c.fd, 1), "N");
  EXPECT_TRUE(closed_by_peer(c.fd));
  EXPECT_EQ((*gate)->stats().refused.load(), 1u);
  EXPECT_EQ((*gate)->stats().admitted.load(), 0u);
  pollfd p{caf.listener.fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // no connection was made to CAF's port
}

TEST(GatekeeperTest, AForgedBaspHeaderOrSilenceIsClosedAtTheDeadline) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret",
                                {.max_pending = 64, .auth_timeout = 100ms});
  ASSERT_TRUE(gate.ok());
  fd_guard hostile{connect_to((*gate)->port())};
  const unsigned char header[] = {1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0,
                                  0, 3, 0, 0, 0,    0,    0,    0,    0, 0, 0, 0, 0, 0};
  ASSERT_TRUE(send_all(hostile.fd, header, sizeof header));  // 28 of 72 bytes, then nothing
  fd_guard idle{connect_to((*gate)->port())};
  EXPECT_TRUE(closed_by_peer(hostile.fd));
  EXPECT_TRUE(closed_by_peer(idle.fd));
  EXPECT_EQ((*gate)->stats().timed_out.load(), 2u);
  pollfd p{caf.listener.fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

TEST(GatekeeperTest, IdleConnectionsAreBoundedAndCannotKeepAPeerOut) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret",
                                {.max_pending = 3, .auth_timeout = 60s});
  ASSERT_TRUE(gate.ok());
  std::vector<fd_guard> idle(4);
  for (auto& g : idle) g.fd = connect_to((*gate)->port());
  EXPECT_TRUE(closed_by_peer(idle[0].fd));  // three may wait: the fourth closed the oldest
  // A peer that sends its frame at once gets in although three idle connections wait.
  fd_guard c{connect_to((*gate)->port())};
  const auto frame = *make_auth_frame("secret");
  ASSERT_TRUE(send_all(c.fd, frame.data(), frame.size()));
  EXPECT_EQ(read_n(c.fd, 1), "Y");
  EXPECT_TRUE(closed_by_peer(idle[1].fd));  // it took the place of the oldest idle one
  EXPECT_EQ((*gate)->stats().admitted.load(), 1u);
  EXPECT_EQ((*gate)->stats().overflow.load(), 2u);
}

TEST(GateTunnelTest, CarriesOneLocalConnectionThroughTheGate) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret");
  ASSERT_TRUE(gate.ok());
  auto tunnel = gate_tunnel::open("127.0.0.1", (*gate)->port(), "secret", 5s);
  ASSERT_TRUE(tunnel.ok()) << tunnel.error().to_string();
  fd_guard local{connect_to((*tunnel)->local_port())};
  fd_guard in{caf.accept_one()};
  ASSERT_GE(in.fd, 0);
  ASSERT_TRUE(send_all(local.fd, "ping", 4));
  EXPECT_EQ(read_n(in.fd, 4), "ping");
  ASSERT_TRUE(send_all(in.fd, "pong", 4));
  EXPECT_EQ(read_n(local.fd, 4), "pong");
  EXPECT_FALSE((*tunnel)->refused());
}

TEST(GateTunnelTest, AWrongTokenIsRefusedAndTheLocalConnectionCloses) {
  inner_server caf;
  auto gate = gatekeeper::start("127.0.0.1", 0, caf.port, "secret");
  ASSERT_TRUE(gate.ok());
  auto tunnel = gate_tunnel::open("127.0.0.1", (*gate)->port(), "guess", 5s);
  ASSERT_TRUE(tunnel.ok());
  fd_guard local{connect_to((*tunnel)->local_port())};
  EXPECT_TRUE(closed_by_peer(local.fd));
  EXPECT_TRUE((*tunnel)->refused());
}

}  // namespace
}  // namespace kvc::control
