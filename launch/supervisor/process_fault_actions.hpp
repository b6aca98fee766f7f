#pragma once
/// process_fault_actions: carries out the process faults of a node's launch on its children
/// (docs/faults.md): after the step of the scheduler's progress line that a fault names
/// (process_fault_schedule decides which), SIGKILL to a worker (kill_rank) or the scheduler
/// (kill_scheduler), SIGSTOP to a worker (hang_rank) and SIGCONT at its resume time; a worker
/// stopped for good is killed once the scheduler declares it lost. After kill_scheduler the
/// workers must end on their own: supervision's orders wait (a signal the launcher got is
/// still passed on) until connection_timeout_ms + stop_timeout_ms, past which the workers left
/// are killed and the invariant fails. Each fault is printed as {"event":"fault",...}.
///
/// Not thread-safe: the launcher's loop (node_run) owns it and its children.
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launch/process/spawned_process.hpp"
#include "launch/supervisor/child_reports.hpp"
#include "launch/supervisor/process_faults.hpp"
#include "launch/supervisor/supervision.hpp"

namespace kvc::launch {

/// What the fault actions reach of the launcher: its children and how it speaks.
struct fault_targets {
  std::vector<spawned_process>& children;  ///< 0: the scheduler; k + 1: ranks[k]
  const std::vector<rank_id>& ranks;
  const supervision& sup;
  std::function<std::string(size_t child)> role;         ///< "scheduler", "worker 3"
  std::function<void(const std::string& message)> warn;  ///< at log level warn
  std::function<void(const std::string& message)> fail;  ///< always shown
};

class process_fault_actions {
 public:
  using clock = std::chrono::steady_clock;

  /// `orphan_wait`: how long the workers get to end on their own after kill_scheduler.
  process_fault_actions(process_fault_schedule schedule, uint64_t seed,
                        std::chrono::milliseconds orphan_wait, fault_targets targets);

  /// The scheduler completed `step`: the faults due are carried out.
  void after_step(step_id step);
  /// The scheduler declared `rank`'s `incarnation` lost: a worker stopped for good is killed
  /// (and, under on-failure, restarted like any failed worker).
  void on_rank_lost(rank_id rank, uint32_t incarnation);
  /// SIGCONT to hung workers whose resume time came; SIGKILL to the workers left at the
  /// orphan deadline.
  void on_time(clock::time_point now);
  /// The next time on_time has something to do; none when nothing waits.
  std::optional<clock::time_point> deadline() const;

  /// After kill_scheduler, until the orphan deadline: the workers are left to end on their own.
  bool workers_left_alone() const { return orphan_deadline_.has_value(); }
  /// `child` is about to get `sig` from supervision: a stopped child is continued first (it
  /// could not act on it otherwise), but for SIGKILL.
  void before_signal(size_t child, int sig);
  /// `child` exited: it is no longer stopped.
  void on_exit(size_t child) { stopped_[child] = false; }

  /// The faults carried out and their outcome, for the fault report.
  process_fault_tally tally() const;

 private:
  size_t child_of(rank_id rank) const;

  process_fault_schedule schedule_;
  uint64_t seed_;
  std::chrono::milliseconds orphan_wait_;
  fault_targets t_;
  fault_counts fired_{};
  std::vector<bool> stopped_;  ///< per child: SIGSTOPped and not continued
  struct resume {
    clock::time_point at;
    size_t child;
    uint32_t incarnation;
  };
  std::vector<resume> resumes_;  ///< hang_rank with resume=MS: SIGCONT due
  bool scheduler_killed_ = false;
  /// kill_scheduler: until then the workers must exit on their own; past it they are killed.
  std::optional<clock::time_point> orphan_deadline_;
  bool workers_killed_ = false;  ///< a worker outlived orphan_deadline_
};

}  // namespace kvc::launch
