#pragma once
/// fault_injector: the pure decision half of fault injection. Fed one call per transfer in
/// submission order, it says which fault (if any) that transfer gets under a fault_plan. No
/// threads, no clock, no global RNG: the same plan and the same sequence of directions give the
/// same decisions, so a failing run replays exactly. Reusable by any layer that counts
/// transfers (copy engines today; lost or duplicated completions later).
/// Not thread-safe: one owner.
#include <array>
#include <cstdint>
#include <vector>

#include "proto/fault_plan.hpp"

namespace kvc::cuda {

class fault_injector {
 public:
  struct decision {
    fault_action action = fault_action::none;
    int rule = -1;               ///< index of the rule that fired, -1 for none
    uint64_t ordinal = 0;        ///< the transfer's 0-based ordinal within the rule's target
    uint64_t release_after = 0;  ///< copied from the rule for delay
  };

  /// The plan is validated; an invalid one is errc::invalid_argument.
  static result<fault_injector> make(fault_plan plan);

  /// Decision for the next transfer of `dir` (store or load, not any); advances the counters.
  decision next(fault_target dir);

  /// Transfers seen so far of a target (any = all).
  uint64_t seen(fault_target t) const noexcept { return seen_[static_cast<size_t>(t)]; }
  /// How often a rule fired.
  uint64_t fired(size_t rule) const noexcept { return rule < fired_.size() ? fired_[rule] : 0; }
  const fault_plan& plan() const noexcept { return plan_; }

  /// The deterministic uniform draw in [0, 1) for (seed, rule, ordinal).
  static double draw(uint64_t seed, size_t rule, uint64_t ordinal) noexcept;

 private:
  explicit fault_injector(fault_plan plan);

  fault_plan plan_;
  std::array<uint64_t, 3> seen_{};  ///< indexed by fault_target
  std::vector<uint64_t> fired_;
};

}  // namespace kvc::cuda
