#pragma once
/// child_process: a real child process started with posix_spawn, its stdin and stdout connected
/// to pipes (stderr inherited), for the multi-process tests. Lines go in with write_line and
/// come out with read_line, which waits with poll() up to a deadline: no sleeps. wait() closes
/// stdin, reads stdout to its end and reaps the child; the destructor kills (SIGKILL) and reaps a
/// child that is still running, so a failing test leaves no process behind.
///
/// Test support. Not thread-safe: one owner.
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "proto/status.hpp"

namespace kvc::testing {

class child_process {
 public:
  /// Starts `exe` with `args` (argv[1..]). errc::io_error when the pipes or the spawn fail.
  static result<child_process> spawn(const std::string& exe, const std::vector<std::string>& args);

  child_process(child_process&& o) noexcept;
  child_process& operator=(child_process&&) = delete;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process();

  /// Writes `line` and a newline to the child's stdin. errc::io_error when the child is gone.
  status write_line(const std::string& line);
  /// The next line of the child's stdout (without the newline), waiting up to `timeout`.
  /// errc::timeout when none came in time, errc::io_error at the end of its output.
  result<std::string> read_line(std::chrono::milliseconds timeout);
  /// Closes stdin, collects the rest of stdout (up to `timeout`), then reaps the child and
  /// returns its exit status as from waitpid (use WIFEXITED / WEXITSTATUS). When the output does
  /// not end in time the child is killed first and errc::timeout is returned.
  result<int> wait(std::chrono::milliseconds timeout);
  /// Lines read by wait() after the last read_line.
  const std::vector<std::string>& trailing_lines() const noexcept { return trailing_; }

  pid_t pid() const noexcept { return pid_; }
  bool running() const noexcept { return pid_ > 0; }

 private:
  child_process(pid_t pid, int in_fd, int out_fd) : pid_(pid), in_(in_fd), out_(out_fd) {}
  void close_fds();
  /// Reads what is available into buf_; false at end of output or on error.
  bool fill();

  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string buf_;
  bool eof_ = false;
  std::vector<std::string> trailing_;
};

}  // namespace kvc::testing
