#pragma once
/// fault_plan: a seeded, deterministic description of which transfers should fail or be held
/// back, for fault-injection tests and chaos runs. A plain value (no behaviour beyond
/// validation): cuda::fault_injector turns it into decisions, faulty_copy_engine applies them.
///
/// Rules are checked in order for every transfer; the first rule that fires decides. A rule
/// watches the transfers of its target (stores, loads or any) and counts them from 0: `nth`
/// fires on that ordinal, `probability` fires on each with probability p, drawn from a hash of
/// (seed, rule index, ordinal) so a decision never depends on the order of other draws.
#include <cstdint>
#include <string_view>
#include <vector>

#include "proto/status.hpp"

namespace kvc {

/// Which transfers a rule watches. store = GPU→CPU, load = CPU→GPU.
enum class fault_target : uint8_t { any = 0, store = 1, load = 2 };

enum class fault_trigger : uint8_t {
  nth = 0,          ///< the rule's `nth` transfer (0-based among its target's transfers)
  probability = 1,  ///< each transfer with `probability`
};

enum class fault_action : uint8_t {
  none = 0,
  fail_at_submit = 1,      ///< submit returns errc::injected_fault; nothing is copied
  fail_at_completion = 2,  ///< the copy runs, but the transfer reports failed (injected_fault)
  delay = 3,               ///< completion is held back (and, FIFO, everything behind it)
};

struct fault_rule {
  fault_target target = fault_target::any;
  fault_trigger trigger = fault_trigger::nth;
  uint64_t nth = 0;          ///< trigger nth
  double probability = 0.0;  ///< trigger probability, in [0, 1]
  fault_action action = fault_action::fail_at_submit;
  /// delay: released once this many more transfers were accepted after it (any direction);
  /// 0 = held until released explicitly or waited on.
  uint64_t release_after = 0;
  uint64_t max_fires = 0;  ///< 0 = unlimited
};

struct fault_plan {
  uint64_t seed = 0;
  std::vector<fault_rule> rules;

  bool empty() const noexcept { return rules.empty(); }
};

/// errc::invalid_argument naming the first bad rule: action none, a probability outside
/// [0, 1] (or NaN), or release_after on a rule whose action is not delay.
status validate(const fault_plan& plan);

std::string_view to_string(fault_target t) noexcept;
std::string_view to_string(fault_action a) noexcept;

}  // namespace kvc
