#pragma once
/// spawned_process: one child of `kvconnect launch` (fork + exec), its stdout on a pipe the
/// launcher reads, its stderr shared with the launcher's, its end watched through a pidfd (the
/// launcher polls both with the rest of its events), its stdin the given input (an anonymous
/// in-memory file, read from its start: nothing on disk, nothing another user can read) or the
/// launcher's own. The child starts with an empty signal
/// mask (the launcher's signal_watcher blocks SIGINT / SIGTERM, and a mask survives exec), the
/// given environment, and PR_SET_PDEATHSIG = SIGKILL, so a launcher that is killed leaves no
/// child behind.
///
/// Ownership: the object owns the child: the destructor SIGKILLs and reaps one still running.
/// Movable, not thread-safe: the launcher's loop owns it.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "proto/status.hpp"

namespace kvc::launch {

class spawned_process {
 public:
  spawned_process() = default;
  /// Starts argv[0] (a path) with `argv`, the environment `env` ("NAME=value" items) and, when
  /// `input` is set, that text on its stdin. errc::io_error naming the call that failed (pipe,
  /// memfd_create, write, fork, exec, pidfd_open); then no child is left.
  static result<spawned_process> start(const std::vector<std::string>& argv,
                                       const std::vector<std::string>& env,
                                       const std::optional<std::string>& input = std::nullopt);

  spawned_process(spawned_process&& o) noexcept;
  spawned_process& operator=(spawned_process&& o) noexcept;
  spawned_process(const spawned_process&) = delete;
  spawned_process& operator=(const spawned_process&) = delete;
  ~spawned_process();

  pid_t pid() const noexcept { return pid_; }
  /// Readable when the child wrote to stdout; -1 once closed (close_stdout).
  int stdout_fd() const noexcept { return out_; }
  /// Readable once the child has exited.
  int exit_fd() const noexcept { return pidfd_; }
  bool running() const noexcept { return pid_ > 0 && !exit_code_; }

  void close_stdout();
  /// errc::precondition_failed once the child was reaped.
  status signal(int sig);
  /// Reaps the child after exit_fd() became readable: its exit code, or 128 + the signal that
  /// ended it. Returns the same code again once reaped.
  int reap();

 private:
  void release() noexcept;

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_ = -1;
  std::optional<int> exit_code_;
};

}  // namespace kvc::launch
