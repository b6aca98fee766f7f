#pragma once
/// tier_fault_decider: the pure decision half of fail_io (docs/faults.md), for one rank's file
/// tier. Fed one call per tier job the rank starts, in order, with the job's direction (read:
/// a promotion or a file check; write: a cascade), it says whether an injected I/O failure
/// fails that job. The rank's tier_executor then fails the job without doing its I/O, so the
/// planner sees it as it sees a real I/O error: a failed promotion is a miss (recomputed), a
/// failed cascade or check drops the block, and no byte of the job reaches the pool or a file.
///
/// Every fail_io spec of the rank (its rank, or none) whose op matches counts the job, from 0:
/// that count is the job's ordinal for the spec. A spec fires on its `nth` ordinal, or on each
/// with probability p drawn from fault_draw(rank seed, spec index, ordinal), until it fired
/// `max` times; the first spec that fires decides, the others still count. The rank seed is
/// derived from the config's seed and the rank, so ranks draw independently and the same
/// config gives the same failures. No threads, no clock, no global RNG. Not thread-safe.
#include <cstdint>
#include <vector>

#include "proto/fault_plan.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc {

class tier_fault_decider {
 public:
  /// The fail_io specs of `config` that concern `rank`. errc::invalid_argument for an invalid
  /// config.
  static result<tier_fault_decider> make(const fault_config& config, rank_id rank);

  /// True when the rank's next tier job of direction `op` (read or write, not any) fails.
  bool next(fault_io_op op);

  /// Jobs failed so far (fault_kind::fail_io's count).
  uint64_t fired() const noexcept { return fired_; }
  bool empty() const noexcept { return specs_.empty(); }

 private:
  tier_fault_decider(uint64_t seed, std::vector<fault_spec> specs)
      : seed_(seed), specs_(std::move(specs)), seen_(specs_.size(), 0), fires_(specs_.size(), 0) {}

  uint64_t seed_ = 0;
  std::vector<fault_spec> specs_;
  std::vector<uint64_t> seen_;   ///< per spec: jobs in its scope so far
  std::vector<uint64_t> fires_;  ///< per spec
  uint64_t fired_ = 0;
};

}  // namespace kvc
