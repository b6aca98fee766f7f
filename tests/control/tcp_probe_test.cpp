// probe_tcp against real loopback sockets: a listener answers, a closed port refuses, a full
// accept queue never answers (Linux drops the SYN), a bad name does not resolve.
#include "actors/control/tcp_probe.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvc::control {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

/// A TCP socket bound to 127.0.0.1 on a free port, listening with `backlog` unless negative.
struct loopback_socket {
  int fd = -1;
  uint16_t port = 0;

  explicit loopback_socket(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port = ntohs(a.sin_port);
    if (backlog >= 0) {
      EXPECT_EQ(::listen(fd, backlog), 0);
    }
  }
  ~loopback_socket() { ::close(fd); }
};

TEST(TcpProbeTest, AListenerAnswers) {
  loopback_socket listener{16};
  EXPECT_TRUE(probe_tcp("127.0.0.1", listener.port, 5s).ok());
  EXPECT_TRUE(probe_tcp("localhost", listener.port, 5s).ok());
}

TEST(TcpProbeTest, AClosedPortRefuses) {
  uint16_t port = 0;
  {
    loopback_socket bound{-1};  // bound, never listening: connections are refused
    port = bound.port;
    const status st = probe_tcp("127.0.0.1", port, 5s);
    EXPECT_EQ(st.code(), errc::io_error);
    EXPECT_THAT(st.message(), HasSubstr("refused"));
  }
}

TEST(TcpProbeTest, AFullAcceptQueueTimesOut) {
  loopback_socket listener{0};
  // The first connection fills the accept queue (nobody accepts); the probe's SYN is dropped.
  const int first = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(listener.port);
  ASSERT_EQ(::connect(first, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const status st = probe_tcp("127.0.0.1", listener.port, 200ms);
  EXPECT_EQ(st.code(), errc::timeout);
  EXPECT_THAT(st.message(), HasSubstr("no answer within 200 ms"));
  ::close(first);
}

TEST(TcpProbeTest, ANameThatDoesNotResolveIsAnIoError) {
  EXPECT_EQ(probe_tcp("no-such-host.invalid", 80, 1s).code(), errc::io_error);
}

}  // namespace
}  // namespace kvc::control
