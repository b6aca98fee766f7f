#include "actors/control/gate.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/control/tcp_probe.hpp"

namespace kvc::control {

namespace {

using steady = std::chrono::steady_clock;
constexpr char magic[8] = {'K', 'V', 'C', 'G', 'A', 'T', 'E', '1'};
/// The gatekeeper's one-byte answer to a whole frame.
constexpr char admitted_byte = 'Y';
constexpr char refused_byte = 'N';

/// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

status sys_error(const std::string& what) {
  return make_error(errc::io_error, "gate: " + what + ": " + std::strerror(errno));
}

/// A non-blocking listening socket on host:port; the port it got.
result<std::pair<unique_fd, uint16_t>> listen_on(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return make_error(errc::io_error, "gate: " + host + ": " + ::gai_strerror(rc));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list{found, ::freeaddrinfo};
  unique_fd fd{::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
  if (!fd) return sys_error("socket");
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) {
    return sys_error("cannot bind " + host + ":" + std::to_string(port));
  }
  if (::listen(fd.get(), 128) != 0) return sys_error("listen");
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return sys_error("getsockname");
  }
  const uint16_t got = addr.ss_family == AF_INET6
                           ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                           : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return std::pair<unique_fd, uint16_t>{std::move(fd), got};
}

/// One direction's bytes between a read and the matching write.
struct byte_buffer {
  std::vector<char> data = std::vector<char>(64 * 1024);
  size_t begin = 0;
  size_t end = 0;
  bool empty() const noexcept { return begin == end; }
  bool full() const noexcept { return end == data.size(); }
};

/// Two connected sockets whose bytes are copied both ways until either ends.
struct relay_pair {
  relay_pair(unique_fd x, unique_fd y) : a(std::move(x)), b(std::move(y)) {}

  unique_fd a;
  unique_fd b;
  byte_buffer ab;  // read from a, to be written to b
  byte_buffer ba;
  bool dead = false;

  short events_a() const { return (ab.full() ? 0 : POLLIN) | (ba.empty() ? 0 : POLLOUT); }
  short events_b() const { return (ba.full() ? 0 : POLLIN) | (ab.empty() ? 0 : POLLOUT); }

  static bool read_into(int fd, byte_buffer& buf) {
    const ssize_t n = ::read(fd, buf.data.data() + buf.end, buf.data.size() - buf.end);
    if (n > 0) buf.end += static_cast<size_t>(n);
    return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
  }
  static bool write_from(int fd, byte_buffer& buf) {
    const ssize_t n = ::send(fd, buf.data.data() + buf.begin, buf.end - buf.begin, MSG_NOSIGNAL);
    if (n > 0) buf.begin += static_cast<size_t>(n);
    if (buf.empty()) buf.begin = buf.end = 0;
    return n >= 0 || errno == EAGAIN || errno == EINTR;
  }
  /// Handles one poll result per side; marks the pair dead when either side ended or failed.
  void handle(short ra, short rb) {
    if ((ra | rb) & (POLLERR | POLLNVAL)) dead = true;
    if (!dead && (ra & (POLLIN | POLLHUP))) dead = !read_into(a.get(), ab) || (ra & POLLHUP);
    if (!dead && (rb & (POLLIN | POLLHUP))) dead = !read_into(b.get(), ba) || (rb & POLLHUP);
    if (!dead && !ab.empty()) dead = !write_from(b.get(), ab);
    if (!dead && !ba.empty()) dead = !write_from(a.get(), ba);
  }
};

unique_fd make_wake_fd() {
  return unique_fd{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
}

void wake(const unique_fd& fd) {
  const uint64_t one = 1;
  (void)!::write(fd.get(), &one, sizeof one);
}

int poll_ms(steady::duration d) {
  if (d <= steady::duration::zero()) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(d).count());
}

/// Connects to 127.0.0.1:port (the local CAF listener): a loopback connect is immediate.
result<unique_fd> connect_loopback(uint16_t port) {
  auto fd = connect_tcp("127.0.0.1", port, std::chrono::milliseconds{1000});
  if (!fd) return fd.error();
  return unique_fd{*fd};
}

}  // namespace

result<auth_frame> make_auth_frame(std::string_view token) {
  if (token.empty() || token.size() > max_token_bytes) {
    return make_error(errc::invalid_argument,
                      "the token must have 1 to " + std::to_string(max_token_bytes) + " bytes");
  }
  auth_frame f{};
  std::memcpy(f.data(), magic, sizeof magic);
  std::memcpy(f.data() + sizeof magic, token.data(), token.size());
  return f;
}

bool check_auth_frame(const auth_frame& frame, std::string_view token) noexcept {
  auth_frame want{};
  std::memcpy(want.data(), magic, sizeof magic);
  if (!token.empty() && token.size() <= max_token_bytes) {
    std::memcpy(want.data() + sizeof magic, token.data(), token.size());
  } else {
    want[0] = 0;  // an unusable token matches nothing
  }
  unsigned char diff = 0;
  for (size_t i = 0; i < auth_frame_bytes; ++i)
    diff |= static_cast<unsigned char>(frame[i] ^ want[i]);
  return diff == 0;
}

auth_reader::verdict auth_reader::feed(std::span<const char> bytes, std::string_view token,
                                       size_t& taken) noexcept {
  taken = std::min(bytes.size(), missing());
  if (taken == 0) return verdict_;
  std::memcpy(frame_.data() + got_, bytes.data(), taken);
  got_ += taken;
  if (got_ == auth_frame_bytes) {
    verdict_ = check_auth_frame(frame_, token) ? verdict::admitted : verdict::refused;
  }
  return verdict_;
}

// --- gatekeeper ---

struct gatekeeper::impl {
  struct pending {
    unique_fd fd;
    auth_reader reader;
    steady::time_point deadline;
  };

  unique_fd listener;
  unique_fd wake_fd = make_wake_fd();
  uint16_t port = 0;
  uint16_t inner_port = 0;
  std::string token;
  gate_limits limits;
  gate_stats stats;
  std::list<pending> waiting;
  std::list<relay_pair> relays;
  std::thread thread;

  void accept_all() {
    for (;;) {
      unique_fd c{::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)};
      if (!c) return;  // EAGAIN (or a transient error: poll tells again)
      if (relays.size() >= limits.max_relayed) {
        ++stats.overflow;
        continue;  // closed at once
      }
      if (waiting.size() >= limits.max_pending) {
        // The oldest waiting connection goes: idle connections cannot keep a peer out that
        // sends its frame as soon as it is connected, as a worker's tunnel does.
        waiting.pop_front();
        ++stats.overflow;
      }
      waiting.push_back({std::move(c), {}, steady::now() + limits.auth_timeout});
    }
  }

  /// Reads what the peer sent of its frame. Whether it is finished with (admitted or refused).
  bool read_frame(pending& p) {
    char buf[auth_frame_bytes];
    const ssize_t n = ::read(p.fd.get(), buf, p.reader.missing());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (n <= 0) {
      ++stats.refused;
      return true;
    }
    size_t taken = 0;
    const auto v = p.reader.feed({buf, static_cast<size_t>(n)}, token, taken);
    if (v == auth_reader::verdict::incomplete) return false;
    if (v == auth_reader::verdict::refused) {
      ++stats.refused;
      (void)!::send(p.fd.get(), &refused_byte, 1, MSG_NOSIGNAL);
      spdlog::warn("gate: a connection was refused: wrong token");
      return true;
    }
    auto inner = connect_loopback(inner_port);
    if (!inner) {
      ++stats.refused;
      spdlog::error("gate: cannot reach the local scheduler: {}", inner.error().to_string());
      return true;
    }
    ++stats.admitted;
    (void)!::send(p.fd.get(), &admitted_byte, 1, MSG_NOSIGNAL);
    relays.emplace_back(std::move(p.fd), std::move(inner).value());
    return true;
  }

  void run() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_fd.get(), POLLIN, 0});
      fds.push_back({listener.get(), POLLIN, 0});
      auto next_deadline = steady::time_point::max();
      for (const auto& p : waiting) {
        fds.push_back({p.fd.get(), POLLIN, 0});
        next_deadline = std::min(next_deadline, p.deadline);
      }
      for (const auto& r : relays) {
        fds.push_back({r.a.get(), r.events_a(), 0});
        fds.push_back({r.b.get(), r.events_b(), 0});
      }
      const int timeout = waiting.empty() ? -1 : poll_ms(next_deadline - steady::now());
      if (::poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      size_t i = 2;
      const auto now = steady::now();
      for (auto it = waiting.begin(); it != waiting.end(); ++i) {
        bool done = (fds[i].revents != 0) && read_frame(*it);
        if (!done && now >= it->deadline) {
          ++stats.timed_out;
          spdlog::warn("gate: a connection sent no whole auth frame within {} ms: closed",
                       limits.auth_timeout.count());
          done = true;
        }
        it = done ? waiting.erase(it) : std::next(it);
      }
      // Relays admitted in this pass were appended after the ones polled: stop at those.
      auto it = relays.begin();
      for (; i + 1 < fds.size(); i += 2, ++it) {
        it->handle(fds[i].revents, fds[i + 1].revents);
      }
      relays.remove_if([](const relay_pair& r) { return r.dead; });
      if (fds[1].revents) accept_all();
    }
  }
};

gatekeeper::gatekeeper(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gatekeeper::~gatekeeper() {
  wake(impl_->wake_fd);
  if (impl_->thread.joinable()) impl_->thread.join();
}

result<std::unique_ptr<gatekeeper>> gatekeeper::start(const std::string& host, uint16_t port,
                                                      uint16_t inner_port, std::string_view token,
                                                      gate_limits limits) {
  if (auto f = make_auth_frame(token); !f) return f.error();
  auto l = listen_on(host, port);
  if (!l) return l.error();
  auto p = std::make_unique<impl>();
  if (!p->wake_fd) return sys_error("eventfd");
  p->listener = std::move(l->first);
  p->port = l->second;
  p->inner_port = inner_port;
  p->token = std::string{token};
  p->limits = limits;
  std::unique_ptr<gatekeeper> g{new gatekeeper(std::move(p))};
  g->impl_->thread = std::thread([i = g->impl_.get()] { i->run(); });
  return g;
}

uint16_t gatekeeper::port() const noexcept {
  return impl_->port;
}

const gate_stats& gatekeeper::stats() const noexcept {
  return impl_->stats;
}

// --- gate_tunnel ---

struct gate_tunnel::impl {
  unique_fd listener;
  unique_fd wake_fd = make_wake_fd();
  uint16_t local_port = 0;
  std::string host;
  uint16_t port = 0;
  auth_frame frame{};
  std::chrono::milliseconds timeout{0};
  std::thread thread;

  std::atomic<bool> refused{false};

  bool send_frame(int fd) {
    size_t sent = 0;
    while (sent < frame.size()) {
      if (!wait_for(fd, POLLOUT, poll_ms(timeout))) return false;
      const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
      if (n > 0) sent += static_cast<size_t>(n);
    }
    return true;
  }

  /// The gatekeeper's answer: admitted, or refused (remembered for refused()).
  bool read_answer(int fd) {
    char answer = 0;
    for (;;) {
      if (!wait_for(fd, POLLIN, poll_ms(timeout))) return false;
      const ssize_t n = ::read(fd, &answer, 1);
      if (n == 1) break;
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) return false;
    }
    if (answer == admitted_byte) return true;
    refused = true;
    return false;
  }

  /// Blocks (with the wake fd) until `fd` has `events`; false when woken to stop.
  bool wait_for(int fd, short events, int timeout_ms = -1) {
    pollfd p[2] = {{wake_fd.get(), POLLIN, 0}, {fd, events, 0}};
    while (::poll(p, 2, timeout_ms) < 0) {
      if (errno != EINTR) return false;
    }
    return p[0].revents == 0 && p[1].revents != 0;
  }

  void run() {
    if (!wait_for(listener.get(), POLLIN)) return;
    unique_fd local{::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)};
    listener.reset();  // exactly one connection: nobody else rides on this tunnel
    if (!local) return;
    auto remote = connect_tcp(host, port, timeout);
    if (!remote) return;  // closing `local` makes CAF's connect fail
    unique_fd gate{*remote};
    if (!send_frame(gate.get()) || !read_answer(gate.get())) return;
    relay_pair r{std::move(local), std::move(gate)};
    std::vector<pollfd> fds(3);
    while (!r.dead) {
      fds[0] = {wake_fd.get(), POLLIN, 0};
      fds[1] = {r.a.get(), r.events_a(), 0};
      fds[2] = {r.b.get(), r.events_b(), 0};
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents) return;
      r.handle(fds[1].revents, fds[2].revents);
    }
  }
};

gate_tunnel::gate_tunnel(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

gate_tunnel::~gate_tunnel() {
  wake(impl_->wake_fd);
  if (impl_->thread.joinable()) impl_->thread.join();
}

result<std::unique_ptr<gate_tunnel>> gate_tunnel::open(const std::string& host, uint16_t port,
                                                       std::string_view token,
                                                       std::chrono::milliseconds timeout) {
  auto frame = make_auth_frame(token);
  if (!frame) return frame.error();
  auto l = listen_on("127.0.0.1", 0);
  if (!l) return l.error();
  auto p = std::make_unique<impl>();
  if (!p->wake_fd) return sys_error("eventfd");
  p->listener = std::move(l->first);
  p->local_port = l->second;
  p->host = host;
  p->port = port;
  p->frame = *frame;
  p->timeout = timeout;
  std::unique_ptr<gate_tunnel> t{new gate_tunnel(std::move(p))};
  t->impl_->thread = std::thread([i = t->impl_.get()] { i->run(); });
  return t;
}

uint16_t gate_tunnel::local_port() const noexcept {
  return impl_->local_port;
}

bool gate_tunnel::refused() const noexcept {
  return impl_->refused;
}

}  // namespace kvc::control
