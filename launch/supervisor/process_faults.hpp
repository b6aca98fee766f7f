#pragma once
/// process_fault_schedule: when `kvconnect launch` carries out the process faults of a run
/// (kill_rank, hang_rank, kill_scheduler; docs/faults.md). Built from the run's fault_config
/// and the ranks of the node (node 0, which runs the scheduler); fed the step of each
/// {"event":"progress"} line of the scheduler, it returns the actions due: each spec fires
/// once, at the first progress step >= its step=, in the order of the specs. The same specs and
/// steps give the same actions. Channel and copy specs are not its business (ignored).
///
/// Pure: no I/O, no clock (the launcher times a hang's resume). Not thread-safe: the
/// launcher's loop owns it.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "proto/fault_plan.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// One signal the launcher is to send.
struct process_action {
  enum class what : uint8_t {
    kill_rank = 0,       ///< SIGKILL to `rank`'s worker
    stop_rank = 1,       ///< SIGSTOP to `rank`'s worker; SIGCONT after resume_ms, or never
    kill_scheduler = 2,  ///< SIGKILL to the scheduler process
  };
  what action = what::kill_rank;
  rank_id rank = 0;                   ///< kill_rank, stop_rank
  std::optional<uint64_t> resume_ms;  ///< stop_rank: none = never continued
  size_t spec = 0;                    ///< index of the spec in the fault_config
  step_id step = 0;                   ///< the spec's step=
  friend bool operator==(const process_action&, const process_action&) = default;
};

/// The fault_kind counted in the fault report's `fired` for an action.
fault_kind kind_of(const process_action& a) noexcept;

class process_fault_schedule {
 public:
  /// errc::invalid_argument naming the spec: a rank that is not one of `node_ranks` (node 0's
  /// launcher carries out every process fault; another node's would have to act).
  static result<process_fault_schedule> create(const fault_config& config,
                                               std::span<const rank_id> node_ranks);

  /// The actions due now that the scheduler completed step `step`; each at most once.
  std::vector<process_action> due(step_id step);
  /// Every action was handed out.
  bool done() const noexcept { return next_ == pending_.size(); }
  bool empty() const noexcept { return pending_.empty(); }

 private:
  std::vector<process_action> pending_;  ///< by step, then spec index
  size_t next_ = 0;
};

}  // namespace kvc::launch
