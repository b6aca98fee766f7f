#pragma once
/// supervision: every decision of `kvconnect launch`'s supervisor over one node's processes
/// (child 0: the scheduler process; 1..n: the workers), like torchrun's agent. The launcher
/// reports what happened (a child started or exited, the scheduler's smoke result, a signal,
/// the time) and carries out the signal orders returned; this class decides.
///
///   - A signal (SIGINT / SIGTERM) is forwarded to every running child; the launch's exit code
///     becomes 128 + the signal (unless the launch was already ending).
///   - A child's unexpected exit ends the launch at once: the scheduler exiting without a passed
///     smoke run, or a worker exiting before the smoke run ended or with a code other than 0.
///     Every other running child gets SIGTERM; exit code 1.
///   - The scheduler exiting 0 after its smoke run passed is the normal end: it stops its
///     workers itself; exit code 0 once every child is gone.
///   - Once the launch is stopping, the children have `grace` to exit; then the ones left get
///     SIGTERM (unless they had it already) and `grace` again; then SIGKILL.
///   - No worker starts once the launch is stopping (start_workers()).
/// The first decision about the outcome stands. Restarts (topology.restart) are not decided
/// here yet: a failure ends the launch.
///
/// Pure: time is passed in; no I/O. Not thread-safe: the launcher's loop owns it.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kvc::launch {

class supervision {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Send `signal` to child `child`.
  struct order {
    size_t child;
    int signal;
    friend bool operator==(const order&, const order&) = default;
  };

  /// `names`: the node's children as reasons name them ("scheduler", "worker 3"), the
  /// scheduler first; none started yet.
  /// `run` names the scheduler's run in the reasons ("smoke run", "simulated run").
  supervision(std::vector<std::string> names, std::chrono::milliseconds grace,
              std::string run = "smoke run");

  void on_started(size_t child);
  /// The scheduler's smoke line: `passed` when every job succeeded and every check passed.
  void on_smoke(bool passed);
  /// Child `child` exited with `code` (128 + signal when killed).
  std::vector<order> on_exit(size_t child, int code, time_point now);
  std::vector<order> on_signal(int signal, time_point now);
  /// Escalation once the deadline has passed.
  std::vector<order> on_time(time_point now);

  /// When on_time has something to do; nullopt while nothing is pending.
  std::optional<time_point> deadline() const { return deadline_; }
  /// False once the launch is stopping.
  bool start_workers() const noexcept { return !stopping_; }
  bool stopping() const noexcept { return stopping_; }
  /// Every started child has exited and the launch is stopping.
  bool finished() const;
  /// 0: the smoke run passed and every child is gone; 1: a failure; 128 + signal.
  int exit_code() const noexcept { return exit_code_.value_or(1); }
  /// Why the launch ended (or is ending), for the summary; empty while it runs.
  const std::string& reason() const noexcept { return reason_; }

 private:
  enum class state { idle, running, exited };

  /// Decides the outcome (once) and starts stopping; SIGTERM to the running children when
  /// `terminate`, else a grace period before it.
  std::vector<order> stop(int code, std::string reason, bool terminate, int signal, time_point now);
  std::vector<order> signal_running(int signal);

  std::vector<std::string> names_;
  std::vector<state> children_;
  std::chrono::milliseconds grace_;
  std::string run_;
  bool smoke_seen_ = false;
  bool smoke_passed_ = false;
  bool stopping_ = false;
  bool terminated_ = false;  ///< SIGTERM (or the forwarded signal) was sent
  bool killed_ = false;
  std::optional<int> exit_code_;
  std::string reason_;
  std::optional<time_point> deadline_;
};

}  // namespace kvc::launch
