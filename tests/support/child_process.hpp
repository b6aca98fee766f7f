#pragma once
/// child_process: a real child process for the multi-process tests, started with fork + exec,
/// with its stdin, stdout and stderr on pipes. Tests synchronise with it by its output lines and
/// its exit, never by sleeping: every wait is a poll() on the pipes and the child's pidfd with a
/// deadline that only a broken run reaches (a safety net next to the CTest TIMEOUT).
///
/// Every wait reads both output pipes, whatever it waits for, so a child never blocks on a full
/// stderr while the test waits for a stdout line. Everything read is kept: stdout_text() and
/// stderr_text() return it, and find_stdout() / find_stderr() search it before waiting for more
/// (the order of lines written by different threads does not matter). read_line() consumes
/// stdout line by line, independently of the searches.
///
/// The child is SIGKILLed and reaped by the destructor when still running, and SIGKILLed by the
/// kernel when the thread that started it ends (PR_SET_PDEATHSIG), so a test that crashes leaves
/// no process behind. start() ignores SIGPIPE in the test process, so writing to a child that
/// died is an error, not the test's death; the child gets the default back.
///
/// Test support. Movable, not thread-safe: one owner.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/status.hpp"

namespace kvc::testing {

class child_process {
 public:
  /// No process: every call fails with errc::precondition_failed.
  child_process() = default;

  /// Starts argv[0] (a path, no PATH search) with `argv`. errc::invalid_argument for an empty
  /// argv; errc::io_error when the pipes, the fork or the exec fail (then no child is left).
  static result<child_process> start(const std::vector<std::string>& argv);

  child_process(child_process&& o) noexcept;
  /// Kills and reaps the process held before, like the destructor.
  child_process& operator=(child_process&& o) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  ~child_process();

  /// Writes `line` and a newline to the child's stdin. errc::io_error when stdin is closed or
  /// the child is gone. Blocks only while the pipe is full (64 KiB the child has not read).
  status write_line(std::string_view line);
  /// Closes the child's stdin: it reads the end of its input.
  status close_stdin();

  /// The next stdout line not yet returned by read_line (without the newline; at the end of
  /// the output, an unterminated last line too), waiting up to `timeout`. errc::timeout when
  /// none came in time, errc::io_error at the end of the output.
  result<std::string> read_line(std::chrono::milliseconds timeout);
  /// The first stdout line containing `needle`, searching all the child wrote so far and then
  /// what it writes next, up to `timeout`. errc::timeout when none came in time,
  /// errc::io_error when the output ended without one.
  result<std::string> find_stdout(std::string_view needle, std::chrono::milliseconds timeout);
  /// find_stdout for stderr.
  result<std::string> find_stderr(std::string_view needle, std::chrono::milliseconds timeout);

  /// Everything read from stdout / stderr so far.
  const std::string& stdout_text() const noexcept { return out_.text; }
  const std::string& stderr_text() const noexcept { return err_.text; }

  /// Sends `sig` to the child. errc::precondition_failed when it has ended (or never started).
  status signal(int sig);
  /// Closes stdin, waits up to `timeout` for the child to end and reaps it, then reads the
  /// rest of its output. The exit code, or 128 + the signal that killed it; errc::timeout when
  /// it is still running at the deadline (it is left running). Once ended, returns the same
  /// code again at once.
  result<int> wait_exit(std::chrono::milliseconds timeout);

  pid_t pid() const noexcept { return pid_; }
  /// Started and not yet reaped.
  bool running() const noexcept { return pid_ > 0 && !exit_code_; }

 private:
  using clock = std::chrono::steady_clock;

  /// One output pipe of the child and everything read from it.
  struct output {
    int fd = -1;
    std::string text;
    bool eof = false;
  };

  /// Reads what one poll() reported on `o`; marks the end of the output.
  static void read_some(output& o);
  /// The first line of `o` from `from` on containing `needle` (an unterminated last line counts
  /// once the output ended); `from` moves past the lines searched.
  static std::optional<std::string> search(const output& o, std::string_view needle, size_t& from);

  /// Reads the output pipes and reaps the child when it ends, until `done()` holds (true) or the
  /// deadline passes or nothing is left to wait for (false).
  bool pump(clock::time_point deadline, const std::function<bool()>& done);
  /// Reaps the child after its pidfd reported its end.
  void reap();
  result<std::string> find(output& o, std::string_view needle, std::chrono::milliseconds timeout);
  /// A failure naming the child, with the end of its stderr (it is not shown elsewhere).
  status failure(errc code, std::string_view what) const;
  /// Kills and reaps a running child, closes every descriptor: back to the empty state.
  void release() noexcept;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int in_ = -1;
  output out_;
  output err_;
  size_t read_pos_ = 0;  ///< read_line's position in out_.text
  std::optional<int> exit_code_;
};

}  // namespace kvc::testing
