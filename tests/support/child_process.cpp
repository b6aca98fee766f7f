#include "tests/support/child_process.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <utility>

namespace kvc::testing {

namespace {

using namespace std::chrono_literals;

/// How long the destructor waits for a SIGKILLed child to be reaped: only a child stuck in the
/// kernel takes longer, and then it is left rather than hanging the test.
constexpr auto kill_patience = 10s;

status sys_error(const std::string& what, int err) {
  return make_error(errc::io_error, what + ": " + std::strerror(err));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(std::exchange(fd, -1));
}

/// Between fork and exec only async-signal-safe calls: the test process may have threads.
[[noreturn]] void exec_child(char* const* argv, pid_t parent, int in, int out, int err,
                             int report) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
  ::dup2(in, STDIN_FILENO);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  // Descriptors the test opened without O_CLOEXEC (sockets, segments) stay with the test.
  ::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
  // An ignored signal stays ignored across exec, a blocked one blocked: give the defaults back.
  ::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execv(argv[0], argv);
  const int e = errno;
  [[maybe_unused]] const ssize_t n = ::write(report, &e, sizeof e);
  ::_exit(127);
}

}  // namespace

result<child_process> child_process::start(const std::vector<std::string>& argv) {
  if (argv.empty()) return make_error(errc::invalid_argument, "child_process: empty argv");
  // A child that died must not kill the test with SIGPIPE on write_line.
  ::signal(SIGPIPE, SIG_IGN);

  // [0] stdin, [1] stdout, [2] stderr, [3] the exec's errno.
  std::array<std::array<int, 2>, 4> p;
  for (auto& fds : p) fds = {-1, -1};
  auto close_all = [&p] {
    for (auto& fds : p) {
      close_fd(fds[0]);
      close_fd(fds[1]);
    }
  };
  for (auto& fds : p) {
    if (::pipe2(fds.data(), O_CLOEXEC) != 0) {
      const int e = errno;
      close_all();
      return sys_error("pipe", e);
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return sys_error("fork", e);
  }
  if (pid == 0) exec_child(args.data(), parent, p[0][0], p[1][1], p[2][1], p[3][1]);

  close_fd(p[0][0]);
  close_fd(p[1][1]);
  close_fd(p[2][1]);
  close_fd(p[3][1]);
  // The report pipe closes at the exec (nothing read) or carries the exec's errno.
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(p[3][0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  close_fd(p[3][0]);
  if (n > 0) {
    // The child is past its write and about to _exit: this waitpid returns at once.
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    close_all();
    return sys_error("exec " + argv[0], exec_errno);
  }

  child_process c;
  c.pid_ = pid;
  c.in_ = std::exchange(p[0][1], -1);
  c.out_.fd = std::exchange(p[1][0], -1);
  c.err_.fd = std::exchange(p[2][0], -1);
  c.pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (c.pidfd_ < 0) {
    const int e = errno;
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    c.pid_ = -1;
    return sys_error("pidfd_open", e);
  }
  return c;
}

child_process::child_process(child_process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      pidfd_(std::exchange(o.pidfd_, -1)),
      in_(std::exchange(o.in_, -1)),
      out_(std::exchange(o.out_, {})),
      err_(std::exchange(o.err_, {})),
      read_pos_(std::exchange(o.read_pos_, 0)),
      exit_code_(std::exchange(o.exit_code_, std::nullopt)) {}

child_process& child_process::operator=(child_process&& o) noexcept {
  if (this != &o) {
    release();
    pid_ = std::exchange(o.pid_, -1);
    pidfd_ = std::exchange(o.pidfd_, -1);
    in_ = std::exchange(o.in_, -1);
    out_ = std::exchange(o.out_, {});
    err_ = std::exchange(o.err_, {});
    read_pos_ = std::exchange(o.read_pos_, 0);
    exit_code_ = std::exchange(o.exit_code_, std::nullopt);
  }
  return *this;
}

child_process::~child_process() {
  release();
}

void child_process::release() noexcept {
  if (running()) {
    ::kill(pid_, SIGKILL);
    close_fd(in_);
    pump(clock::now() + kill_patience, [this] { return exit_code_.has_value(); });
  }
  close_fd(in_);
  close_fd(out_.fd);
  close_fd(err_.fd);
  close_fd(pidfd_);
  pid_ = -1;
  out_ = {};
  err_ = {};
  read_pos_ = 0;
  exit_code_.reset();
}

status child_process::write_line(std::string_view line) {
  if (in_ < 0) return failure(errc::io_error, "stdin is closed");
  std::string s(line);
  s += '\n';
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::write(in_, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return failure(errc::io_error, std::string("write: ") + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

status child_process::close_stdin() {
  if (in_ < 0) return failure(errc::precondition_failed, "stdin is closed");
  close_fd(in_);
  return {};
}

void child_process::read_some(output& o) {
  char buf[65536];
  ssize_t n;
  while ((n = ::read(o.fd, buf, sizeof buf)) < 0 && errno == EINTR) {
  }
  if (n > 0) {
    o.text.append(buf, static_cast<size_t>(n));
  } else {
    o.eof = true;
  }
}

void child_process::reap() {
  int st = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &st, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid_) exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool child_process::pump(clock::time_point deadline, const std::function<bool()>& done) {
  for (;;) {
    if (done()) return true;
    // Outputs at their end are left out, or poll would report them forever.
    std::array<pollfd, 3> fds{};
    std::array<output*, 3> outs{};
    nfds_t n = 0;
    for (output* o : {&out_, &err_}) {
      if (o->fd >= 0 && !o->eof) {
        outs[n] = o;
        fds[n++] = {o->fd, POLLIN, 0};
      }
    }
    if (running() && pidfd_ >= 0) fds[n++] = {pidfd_, POLLIN, 0};
    if (n == 0) return false;  // nothing can change any more
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    const int rc = ::poll(fds.data(), n, left > 0 ? static_cast<int>(left) : 0);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (rc == 0) return done();  // the deadline passed
    for (nfds_t i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (outs[i] != nullptr) {
        read_some(*outs[i]);
      } else {
        reap();
      }
    }
  }
}

std::optional<std::string> child_process::search(const output& o, std::string_view needle,
                                                 size_t& from) {
  while (from < o.text.size()) {
    const size_t nl = o.text.find('\n', from);
    if (nl == std::string::npos && !o.eof) return std::nullopt;  // wait for the rest
    const size_t end = nl == std::string::npos ? o.text.size() : nl;
    const std::string_view line(o.text.data() + from, end - from);
    from = nl == std::string::npos ? end : nl + 1;
    if (line.find(needle) != std::string_view::npos) return std::string(line);
  }
  return std::nullopt;
}

result<std::string> child_process::read_line(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return failure(errc::precondition_failed, "not started");
  auto complete = [this] { return out_.text.find('\n', read_pos_) != std::string::npos; };
  pump(clock::now() + timeout, [&] { return complete() || out_.eof; });
  if (complete() || (out_.eof && read_pos_ < out_.text.size())) {
    size_t end = out_.text.find('\n', read_pos_);
    if (end == std::string::npos) end = out_.text.size();
    std::string line = out_.text.substr(read_pos_, end - read_pos_);
    read_pos_ = std::min(end + 1, out_.text.size());
    return line;
  }
  if (out_.eof) return failure(errc::io_error, "closed its stdout");
  return failure(errc::timeout, "wrote no stdout line in time");
}

result<std::string> child_process::find(output& o, std::string_view needle,
                                        std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return failure(errc::precondition_failed, "not started");
  size_t from = 0;
  std::optional<std::string> hit;
  pump(clock::now() + timeout, [&] {
    hit = search(o, needle, from);
    return hit.has_value() || o.eof;
  });
  if (!hit) hit = search(o, needle, from);  // what the last read brought
  if (hit) return std::move(*hit);
  const char* name = &o == &out_ ? "stdout" : "stderr";
  const std::string what = "no " + std::string(name) + " line with \"" + std::string(needle) + "\"";
  if (o.eof) return failure(errc::io_error, "closed its " + std::string(name) + " with " + what);
  return failure(errc::timeout, what + " in time");
}

result<std::string> child_process::find_stdout(std::string_view needle,
                                               std::chrono::milliseconds timeout) {
  return find(out_, needle, timeout);
}

result<std::string> child_process::find_stderr(std::string_view needle,
                                               std::chrono::milliseconds timeout) {
  return find(err_, needle, timeout);
}

status child_process::signal(int sig) {
  if (!running()) return failure(errc::precondition_failed, "not running");
  // Not reaped yet, so the pid cannot have been reused.
  if (::kill(pid_, sig) != 0) return sys_error("kill", errno);
  return {};
}

result<int> child_process::wait_exit(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return failure(errc::precondition_failed, "not started");
  close_fd(in_);
  if (!pump(clock::now() + timeout, [this] { return exit_code_.has_value(); })) {
    return failure(errc::timeout, "still running at the deadline");
  }
  // All the child wrote is in the pipes now: read it without waiting (a grandchild holding a
  // pipe open is not waited for).
  pump(clock::now(), [] { return false; });
  return *exit_code_;
}

status child_process::failure(errc code, std::string_view what) const {
  std::string m = "child " + std::to_string(pid_) + " " + std::string(what);
  if (!err_.text.empty()) {
    constexpr size_t tail = 1000;
    const size_t from = err_.text.size() > tail ? err_.text.size() - tail : 0;
    m += "; its stderr ends:\n" + err_.text.substr(from);
  }
  return make_error(code, std::move(m));
}

}  // namespace kvc::testing
