#include "tests/multiproc/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

extern char** environ;

namespace kvc::testing {

namespace {

using steady = std::chrono::steady_clock;

status sys_error(const std::string& what) {
  return make_error(errc::io_error, what + ": " + std::strerror(errno));
}

}  // namespace

result<child_process> child_process::spawn(const std::string& exe,
                                           const std::vector<std::string>& args) {
  int in[2];
  int out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return sys_error("pipe");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return sys_error("pipe");
  }
  posix_spawn_file_actions_t fa;
  ::posix_spawn_file_actions_init(&fa);
  ::posix_spawn_file_actions_adddup2(&fa, in[0], STDIN_FILENO);
  ::posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    errno = rc;
    return sys_error("posix_spawn " + exe);
  }
  // A child that died must not kill the test with SIGPIPE on write.
  ::signal(SIGPIPE, SIG_IGN);
  return child_process{pid, in[1], out[0]};
}

child_process::child_process(child_process&& o) noexcept
    : pid_(std::exchange(o.pid_, -1)),
      in_(std::exchange(o.in_, -1)),
      out_(std::exchange(o.out_, -1)),
      buf_(std::move(o.buf_)),
      eof_(o.eof_),
      trailing_(std::move(o.trailing_)) {}

child_process::~child_process() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
  }
  close_fds();
}

void child_process::close_fds() {
  if (in_ >= 0) ::close(std::exchange(in_, -1));
  if (out_ >= 0) ::close(std::exchange(out_, -1));
}

status child_process::write_line(const std::string& line) {
  if (in_ < 0) return make_error(errc::io_error, "stdin is closed");
  std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::write(in_, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_error("write to child " + std::to_string(pid_));
    }
    off += static_cast<size_t>(n);
  }
  return {};
}

bool child_process::fill() {
  char tmp[65536];
  for (;;) {
    const ssize_t n = ::read(out_, tmp, sizeof tmp);
    if (n > 0) {
      buf_.append(tmp, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    eof_ = true;
    return false;
  }
}

result<std::string> child_process::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = steady::now() + timeout;
  for (;;) {
    if (auto pos = buf_.find('\n'); pos != std::string::npos) {
      std::string line = buf_.substr(0, pos);
      buf_.erase(0, pos + 1);
      return line;
    }
    if (eof_ || out_ < 0) {
      return make_error(errc::io_error, "child " + std::to_string(pid_) + " closed its output");
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
    if (left.count() <= 0) {
      return make_error(errc::timeout, "child " + std::to_string(pid_) + " sent no line in time");
    }
    pollfd pfd{out_, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) return sys_error("poll");
    if (rc > 0) fill();
  }
}

result<int> child_process::wait(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return make_error(errc::precondition_failed, "no child to wait for");
  if (in_ >= 0) ::close(std::exchange(in_, -1));
  bool timed_out = false;
  for (;;) {
    auto line = read_line(timeout);
    if (line) {
      trailing_.push_back(std::move(line).value());
      continue;
    }
    timed_out = line.code() == errc::timeout;
    break;
  }
  if (!buf_.empty()) trailing_.push_back(std::exchange(buf_, {}));
  if (timed_out) ::kill(pid_, SIGKILL);
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  close_fds();
  if (timed_out) return make_error(errc::timeout, "the child did not end in time: killed");
  return st;
}

}  // namespace kvc::testing
