#pragma once
/// Test support: a real child process (fork + exec) with its stdout and stderr on pipes.
/// Synchronisation is by reading its output lines and waiting for its exit (a pidfd), never by
/// sleeping; every wait has a deadline that only a broken run reaches (a safety net next to the
/// CTest TIMEOUT). The child is SIGKILLed with the test process (PR_SET_PDEATHSIG) and by the
/// destructor if still running, and always reaped. Single-threaded use.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvc::testing {

class child_process {
 public:
  explicit child_process(const std::vector<std::string>& argv) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    streams_[0].fd = out[0];
    streams_[1].fd = err[0];
    if (pid_ > 0) pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }

  ~child_process() {
    if (running()) {
      ::kill(pid_, SIGKILL);
      wait_exit(std::chrono::seconds(30));
    }
    for (auto& s : streams_) {
      if (s.fd >= 0) ::close(s.fd);
    }
    if (pidfd_ >= 0) ::close(pidfd_);
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  bool started() const { return pid_ > 0 && pidfd_ >= 0; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && !exit_code_; }

  /// The first stdout line containing `needle`, searching everything the child wrote so far and
  /// then what it writes next (so the order of lines from different threads does not matter).
  std::optional<std::string> wait_stdout(std::string_view needle,
                                         std::chrono::milliseconds timeout) {
    return wait_line(streams_[0], needle, timeout);
  }
  std::optional<std::string> wait_stderr(std::string_view needle,
                                         std::chrono::milliseconds timeout) {
    return wait_line(streams_[1], needle, timeout);
  }

  /// Waits for the exit; the exit code, or 128 + signal. Reads the remaining output first.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout) {
    if (exit_code_) return exit_code_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exit_code_) {
      // Streams at EOF are left out (a negative fd), or poll would report them forever.
      pollfd fds[3] = {{pidfd_, POLLIN, 0},
                       {streams_[0].eof ? -1 : streams_[0].fd, POLLIN, 0},
                       {streams_[1].eof ? -1 : streams_[1].fd, POLLIN, 0}};
      const int left = remaining_ms(deadline);
      if (left < 0 || ::poll(fds, 3, left) <= 0) break;
      // Drain the pipes so that a child blocked on a full pipe can finish.
      for (int i = 0; i < 2; ++i) {
        if (fds[i + 1].revents) read_some(streams_[i]);
      }
      if (fds[0].revents) {
        int st = 0;
        if (::waitpid(pid_, &st, 0) == pid_) {
          exit_code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
      }
    }
    if (exit_code_) {
      for (auto& s : streams_) {
        while (!s.eof && read_some(s)) {
        }
      }
    }
    return exit_code_;
  }

  void signal(int sig) const {
    if (running()) ::kill(pid_, sig);
  }

  const std::string& stdout_text() const { return streams_[0].text; }
  const std::string& stderr_text() const { return streams_[1].text; }

 private:
  struct stream {
    int fd = -1;
    std::string text;  // everything read
    bool eof = false;
  };

  static int remaining_ms(std::chrono::steady_clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return left.count() < 0 ? -1 : static_cast<int>(left.count());
  }

  /// One read; false at EOF or error.
  static bool read_some(stream& s) {
    if (s.eof) return false;
    char buf[4096];
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n <= 0) {
      s.eof = true;
      return false;
    }
    s.text.append(buf, static_cast<size_t>(n));
    return true;
  }

  static std::optional<std::string> find_line(const stream& s, std::string_view needle) {
    for (size_t begin = 0;;) {
      const size_t nl = s.text.find('\n', begin);
      if (nl == std::string::npos) return std::nullopt;
      std::string_view line(s.text.data() + begin, nl - begin);
      if (line.find(needle) != std::string_view::npos) return std::string(line);
      begin = nl + 1;
    }
  }

  std::optional<std::string> wait_line(stream& s, std::string_view needle,
                                       std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (auto line = find_line(s, needle)) return line;
      if (s.eof) return std::nullopt;
      pollfd p{s.fd, POLLIN, 0};
      const int left = remaining_ms(deadline);
      if (left < 0 || ::poll(&p, 1, left) <= 0) return std::nullopt;
      read_some(s);
    }
  }

  pid_t pid_ = -1;
  int pidfd_ = -1;
  stream streams_[2];
  std::optional<int> exit_code_;
};

}  // namespace kvc::testing
