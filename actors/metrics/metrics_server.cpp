#include "actors/metrics/metrics_server.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>

#include "actors/metrics/deadline_stream.hpp"

namespace kvc::metrics {

namespace {

/// cpp-httplib's request parsing, routing and answer writing, on a stream of ours: its own
/// accept loop and socket stream are what let one client starve the rest.
class request_handler final : public httplib::Server {
 public:
  /// Answers one request read from `s`, with `Connection: close`.
  bool answer(httplib::Stream& s) {
    bool closed = false;
    return process_request(s, /*close_connection=*/true, closed, nullptr);
  }
};

/// A listening socket on host:port (non-blocking; SO_REUSEADDR only, not httplib's
/// SO_REUSEPORT, so that a port held by another listener is an error); -1 when none binds.
int listen_on(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints,
                    &found) != 0) {
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

uint16_t local_port(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return 0;
  if (sa.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(sa).sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6&>(sa).sin6_port);
}

void close_connection(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace

struct metrics_server::impl {
  server_options options;
  request_handler handler;
  int listen_fd = -1;
  int stop_fd = -1;  // eventfd: readable once stop() was called
  std::atomic<size_t> answering{0};
  std::unique_ptr<httplib::ThreadPool> workers;
  std::thread thread;
  std::mutex stop_mu;

  ~impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (stop_fd >= 0) ::close(stop_fd);
  }

  /// The accepting thread: the gate's connections until stop().
  void run() {
    connection_gate gate(options.gate);
    std::vector<pollfd> fds;
    for (;;) {
      fds.assign({{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}});
      for (int id : gate.waiting()) fds.push_back({id, POLLIN, 0});
      int timeout_ms = -1;
      if (auto due = gate.next_deadline()) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(*due - std::chrono::steady_clock::now());
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, INT32_MAX));
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
      if (fds[1].revents != 0) break;
      const auto now = std::chrono::steady_clock::now();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0) receive(gate, fds[i].fd);
      }
      for (int id : gate.expired(now)) {
        gate.drop(id);
        close_connection(id);
      }
      if (fds[0].revents & POLLIN) accept_all(gate, now);
    }
    for (int id : gate.waiting()) close_connection(id);
  }

  void accept_all(connection_gate& gate, connection_gate::time_point now) {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: all taken; anything else: the next poll tries again
      const auto a = gate.admit(fd, now, answering.load());
      if (a.evicted) close_connection(*a.evicted);
      if (!a.admitted) close_connection(fd);
    }
  }

  /// Bytes on a waiting connection: hands it to a worker once its head is complete.
  void receive(connection_gate& gate, int fd) {
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    const auto head = n > 0 ? gate.append(fd, {buf, static_cast<size_t>(n)})
                            : connection_gate::head::too_large;  // closed or failed
    if (head == connection_gate::head::incomplete) return;
    if (head == connection_gate::head::too_large) {
      gate.drop(fd);
      close_connection(fd);
      return;
    }
    auto ready = gate.dispatch(fd);
    answering.fetch_add(1);
    workers->enqueue([this, fd, r = std::move(ready)]() mutable {
      deadline_stream s(fd, std::move(r.received), r.deadline, stop_fd);
      handler.answer(s);
      close_connection(fd);
      answering.fetch_sub(1);
    });
  }
};

metrics_server::metrics_server(std::unique_ptr<impl> p, uint16_t port)
    : impl_(std::move(p)), port_(port) {}

metrics_server::~metrics_server() {
  stop();
}

result<std::unique_ptr<metrics_server>> metrics_server::start(const std::string& host,
                                                              uint16_t port, render_fn render,
                                                              const server_options& options) {
  if (options.threads == 0 || options.gate.max_connections == 0 ||
      options.gate.request_timeout.count() <= 0) {
    return make_error(errc::invalid_argument,
                      "metrics: threads and max_connections must be >= 1 and request_timeout "
                      "> 0");
  }
  auto p = std::make_unique<impl>();
  p->options = options;
  p->handler.Get("/metrics",
                 [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
                   res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
                 });
  p->listen_fd = listen_on(host, port);
  if (p->listen_fd < 0) {
    return make_error(errc::io_error, "metrics: cannot listen on " + host + ":" +
                                          std::to_string(port) +
                                          " (in use or not an address "
                                          "of this host)");
  }
  p->stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (p->stop_fd < 0) return make_error(errc::io_error, "metrics: eventfd failed");
  const uint16_t bound = local_port(p->listen_fd);
  p->workers = std::make_unique<httplib::ThreadPool>(options.threads);
  impl* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<metrics_server>{new metrics_server(std::move(p), bound)};
}

void metrics_server::stop() {
  if (!impl_) return;
  std::lock_guard<std::mutex> lock(impl_->stop_mu);
  if (!impl_->thread.joinable()) return;
  const uint64_t one = 1;
  (void)!::write(impl_->stop_fd, &one, sizeof one);
  impl_->thread.join();
  impl_->workers->shutdown();  // what is queued ends at once: its streams see the stop
}

}  // namespace kvc::metrics
