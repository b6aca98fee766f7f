#include "actors/metrics/deadline_stream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace kvc::metrics {

namespace {

/// The address of `sa` as text and its port.
void address_of(const sockaddr_storage& sa, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(sa);
    ::inet_ntop(AF_INET, &a.sin_addr, buf, sizeof buf);
    port = ntohs(a.sin_port);
  } else if (sa.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(sa);
    ::inet_ntop(AF_INET6, &a.sin6_addr, buf, sizeof buf);
    port = ntohs(a.sin6_port);
  }
  ip = buf;
}

}  // namespace

bool deadline_stream::wait(short events) const {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
    const int n = ::poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), INT32_MAX)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents != 0) return false;
    if (fds[0].revents != 0) return true;  // ready, or an error the next call reports
  }
}

bool deadline_stream::is_readable() const {
  return consumed_ < received_.size() || wait(POLLIN);
}

bool deadline_stream::is_writable() const {
  return wait(POLLOUT);
}

ssize_t deadline_stream::read(char* ptr, size_t size) {
  if (consumed_ < received_.size()) {
    const size_t n = std::min(size, received_.size() - consumed_);
    std::memcpy(ptr, received_.data() + consumed_, n);
    consumed_ += n;
    return static_cast<ssize_t>(n);
  }
  for (;;) {
    if (!wait(POLLIN)) return -1;
    const ssize_t n = ::recv(fd_, ptr, size, MSG_DONTWAIT);
    if (n >= 0) return n;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
  }
}

ssize_t deadline_stream::write(const char* ptr, size_t size) {
  for (;;) {
    if (!wait(POLLOUT)) return -1;
    const ssize_t n = ::send(fd_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
  }
}

void deadline_stream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0) address_of(sa, ip, port);
}

void deadline_stream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len) == 0) address_of(sa, ip, port);
}

}  // namespace kvc::metrics
