#pragma once
/// slowest_rank_sum: the ranks' share of a launch's connector time. The ranks run a step in
/// parallel, so the step waits for the slowest: the sum, over the steps, of each step's largest
/// connector time among the node's ranks. Each worker sends its steps' times in batches as the
/// run goes (`{"event":"connector_steps",...}`, each rank's in step order), so the launcher keeps
/// only the steps that some rank has sent and another not yet: a step is folded into the sum once
/// every rank of the node has sent a step at or past it (a rank that never ran it, having joined
/// later, does not hold it back). Memory follows the ranks' lag, not the run's length.
///
/// Pure; not thread-safe (the launcher's loop owns it).
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "proto/ids.hpp"

namespace kvc::launch {

class slowest_rank_sum {
 public:
  /// `ranks`: the node's ranks, whose steps are waited for.
  explicit slowest_rank_sum(const std::vector<rank_id>& ranks);

  /// Rank `rank`'s connector time of `step`, in ns. A rank's steps come in ascending order; a
  /// step already folded (every rank had passed it) is not counted again, nor a rank not given
  /// at construction.
  void add(rank_id rank, step_id step, uint64_t ns);
  /// The run ended: the steps still open are folded (a rank that stopped sending holds none).
  void finish();

  /// The sum of the folded steps' slowest times, ns.
  double total_ns() const noexcept { return total_; }
  /// Steps kept, waiting for a rank (the memory in use).
  size_t open_steps() const noexcept { return open_.size(); }

 private:
  void fold();

  std::map<rank_id, step_id> last_;  ///< per rank of the node: its last step sent (0: none)
  std::map<step_id, uint64_t> open_;  ///< steps not folded yet: the slowest so far
  step_id folded_through_ = 0;        ///< steps up to this one are in total_
  double total_ = 0;
};

/// The connector's share of a run in separate processes: (the scheduler's connector ns + the
/// ranks', each step's slowest rank summed over the steps: slowest_rank_sum) / the simulated
/// time. 0 without simulated time.
double launch_connector_share(double scheduler_ns, double ranks_ns, double sim_seconds);

}  // namespace kvc::launch
