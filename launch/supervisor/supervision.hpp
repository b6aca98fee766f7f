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
///   - Except a worker's, while the worker has restarts left (restart.policy on-failure,
///     restart.limit per rank) and its code is not refused_exit_code: then the worker is to be
///     restarted (take_restarts()) with its next incarnation, and the launch goes on. A launch
///     that is stopping, or whose run ended, restarts nothing.
///   - The scheduler exiting 0 after its smoke run passed is the normal end: it stops its
///     workers itself; exit code 0 once every child is gone.
///   - Once the launch is stopping, the children have `grace` to exit; then the ones left get
///     SIGTERM (unless they had it already) and `grace` again; then SIGKILL.
///   - No worker starts once the launch is stopping (start_workers()).
///   - A node without the scheduler (a multi-node launch's other nodes: child 0 never starts):
///     a worker exiting 0 was stopped by the scheduler, which is the run's end; once every
///     worker is gone the launch ends with exit code 0.
/// The first decision about the outcome stands.
///
/// Pure: time is passed in; no I/O. Not thread-safe: the launcher's loop owns it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvc::launch {

class supervision {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  /// `kvconnect worker`'s code for a refused registration or set-up: never restarted.
  static constexpr int refused_exit_code = 2;

  /// Send `signal` to child `child`.
  struct order {
    size_t child;
    int signal;
    friend bool operator==(const order&, const order&) = default;
  };

  /// `names`: the node's children as reasons name them ("scheduler", "worker 3"), the
  /// scheduler first; none started yet. `restart_limit`: restarts allowed per worker (0: a
  /// failure ends the launch, restart.policy never).
  /// `scheduler_here`: false on a node whose scheduler runs elsewhere.
  /// `run` names the scheduler's run in the reasons ("smoke run", "simulated run").
  supervision(std::vector<std::string> names, std::chrono::milliseconds grace,
              uint32_t restart_limit = 0, bool scheduler_here = true,
              std::string run = "smoke run");

  void on_started(size_t child);
  /// The scheduler's smoke line: `passed` when every job succeeded and every check passed.
  void on_smoke(bool passed);
  /// Child `child` exited with `code` (128 + signal when killed).
  std::vector<order> on_exit(size_t child, int code, time_point now);
  std::vector<order> on_signal(int signal, time_point now);
  /// Escalation once the deadline has passed.
  std::vector<order> on_time(time_point now);

  /// The workers to start again now (each once; on_started when it runs, or on_exit when it
  /// could not start). Empty once the launch is stopping.
  std::vector<size_t> take_restarts();
  /// How often `child` was restarted: its incarnation.
  uint32_t incarnation(size_t child) const;
  /// Restarts decided over every child.
  uint32_t restarts() const noexcept { return restarts_total_; }

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
  enum class state { idle, running, restarting, exited };

  /// Decides the outcome (once) and starts stopping; SIGTERM to the running children when
  /// `terminate`, else a grace period before it.
  std::vector<order> stop(int code, std::string reason, bool terminate, int signal, time_point now);
  std::vector<order> signal_running(int signal);

  std::vector<std::string> names_;
  std::vector<state> children_;
  std::vector<uint32_t> restarted_;  ///< per child
  std::vector<size_t> due_;          ///< restarts not yet taken
  std::chrono::milliseconds grace_;
  uint32_t restart_limit_;
  bool scheduler_here_;
  uint32_t restarts_total_ = 0;
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
