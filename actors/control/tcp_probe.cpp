#include "actors/control/tcp_probe.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace kvc::control {

namespace {

using steady = std::chrono::steady_clock;

struct addrinfo_deleter {
  void operator()(addrinfo* a) const noexcept { ::freeaddrinfo(a); }
};

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

/// One non-blocking connect, waited for up to `left`. 0 on success (the socket, non-blocking,
/// moves to `out`), else an errno value (ETIMEDOUT when the time ran out).
int connect_one(const addrinfo& a, steady::duration left, int& out) {
  fd_closer s{::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a.ai_protocol)};
  if (s.fd < 0) return errno;
  if (::connect(s.fd, a.ai_addr, a.ai_addrlen) == 0) {
    out = std::exchange(s.fd, -1);
    return 0;
  }
  if (errno != EINPROGRESS) return errno;
  pollfd p{s.fd, POLLOUT, 0};
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  int n;
  do {
    n = ::poll(&p, 1, static_cast<int>(ms));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  if (n == 0) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  if (err == 0) out = std::exchange(s.fd, -1);
  return err;
}

}  // namespace

result<int> connect_tcp(const std::string& host, uint16_t port,
                        std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return make_error(errc::io_error, where + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, addrinfo_deleter> list{found};
  const auto deadline = steady::now() + timeout;
  int last = ETIMEDOUT;
  for (const addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    const auto left = deadline - steady::now();
    if (left <= steady::duration::zero()) break;
    int fd = -1;
    last = connect_one(*a, left, fd);
    if (last == 0) return fd;
  }
  if (last == ETIMEDOUT) {
    return make_error(errc::timeout, where + ": no answer within " +
                                         std::to_string(timeout.count()) + " ms");
  }
  return make_error(errc::io_error, where + ": " + std::strerror(last));
}

status probe_tcp(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  auto fd = connect_tcp(host, port, timeout);
  if (!fd) return fd.error();
  ::close(*fd);
  return {};
}

}  // namespace kvc::control
