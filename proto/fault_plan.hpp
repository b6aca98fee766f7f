#pragma once
/// The injected faults of a run, as plain values (no behaviour beyond validation and
/// derivation; docs/faults.md):
///   fault_config  every fault of a run (fault_spec: kind, site, scope, trigger) and its seed,
///                 from --fault / --fault-seed or runtime.faults; fault_decider
///                 (fault_decider.hpp) decides the channel's, the launcher owns the processes'.
///   fault_plan    a copy engine's rules, derived per rank from the config (copy_fault_plan):
///                 cuda::fault_injector turns it into decisions, faulty_copy_engine applies them.
///
/// A fault_plan's rules are checked in order for every transfer; the first that fires decides.
/// A rule watches the transfers of its target (stores, loads or any) and counts them from 0:
/// `nth` fires on that ordinal, `probability` fires on each with probability p, drawn from a
/// hash of (seed, rule index, ordinal) so a decision never depends on the order of other draws.
/// Plain values: thread-safe to copy and read.
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "proto/ids.hpp"
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
  /// the device becomes unusable, as after a sticky CUDA error: this transfer, every one in
  /// flight and every later submit fail with errc::device_unavailable
  lose_device = 4,
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

// --- the faults of a run: every kind, where it acts, how it is scoped -------------------------

/// Every fault a run can inject. Stable values (they index fault_counts); names in to_string.
enum class fault_kind : uint8_t {
  drop_report = 0,       ///< channel: a rank's step report never reaches the coordinator
  duplicate_report = 1,  ///< channel: the report arrives twice
  delay_report = 2,      ///< channel: held `delay_steps` steps or `delay_ms` milliseconds
  reorder_reports = 3,   ///< channel: held until the next report passed (swapped with it)
  corrupt_frame = 4,     ///< channel: `bits` bit flips in the encoded report
  fail_copy = 5,         ///< copy engine: a transfer fails at submit or at completion
  delay_copy = 6,        ///< copy engine: a transfer's completion is held back
  kill_rank = 7,         ///< process: SIGKILL to a rank's worker at a step
  hang_rank = 8,         ///< process: SIGSTOP to a rank's worker at a step, SIGCONT later or never
  kill_scheduler = 9,    ///< process: SIGKILL to the scheduler at a step
  lose_device = 10,      ///< copy engine: a sticky device error at a transfer (the rank restarts)
  fail_io = 11,          ///< file tier: a rank's tier job fails as on an I/O error, undone
};
inline constexpr size_t fault_kind_count = 12;

/// Where a kind acts: the step channel's seam, the copy engine, the launcher, or a rank's file
/// tier I/O.
enum class fault_site : uint8_t { channel = 0, copy = 1, process = 2, tier = 3 };

/// Which file tier I/O a fail_io spec watches: read = promotions and file checks (the read
/// queue), write = cascades.
enum class fault_io_op : uint8_t { any = 0, read = 1, write = 2 };
std::string_view to_string(fault_io_op op) noexcept;
fault_site site_of(fault_kind k) noexcept;

/// How often each kind fired, indexed by fault_kind.
using fault_counts = std::array<uint64_t, fault_kind_count>;

/// One fault of a run, as written `kind:key=value,...` (fault_spec_parser.hpp). Plain data.
/// The trigger is `nth` (the 0-based occurrence among those in scope) or `probability` (each
/// occurrence in scope, drawn from seed + spec index + occurrence); process faults fire at
/// `first_step` instead.
struct fault_spec {
  fault_kind kind = fault_kind::drop_report;
  std::optional<rank_id> rank;  ///< none: every rank (kill_scheduler: none)
  /// Copy faults: which transfers (store = GPU->CPU, load = CPU->GPU, any).
  fault_target dir = fault_target::any;
  /// fail_io: which tier jobs (read = promotions and checks, write = cascades, any).
  fault_io_op op = fault_io_op::any;
  /// fail_copy: fail_at_submit or fail_at_completion.
  fault_action at = fault_action::fail_at_submit;
  /// Channel faults: the steps in scope (inclusive). Process faults: the step = first_step.
  step_id first_step = 0;
  step_id last_step = std::numeric_limits<step_id>::max();
  fault_trigger trigger = fault_trigger::probability;
  uint64_t nth = 0;
  double probability = 0.0;
  uint64_t max_fires = 0;      ///< 0 = unlimited
  uint64_t delay_steps = 1;    ///< delay_report by steps: >= 1; 0 with delay_ms
  std::optional<uint64_t> delay_ms;  ///< delay_report by time: >= 1 (then delay_steps is 0)
  uint64_t release_after = 0;  ///< delay_copy: fault_rule::release_after
  uint32_t bits = 1;           ///< corrupt_frame: bits flipped, 1..64
  /// hang_rank: SIGCONT this long after SIGSTOP; none: never.
  std::optional<uint64_t> resume_ms;

  friend bool operator==(const fault_spec&, const fault_spec&) = default;
};

/// The faults of a run and their seed (`--fault SPEC`... `--fault-seed N`, or the config's
/// runtime.faults / runtime.fault_seed). The same config gives the same faults.
struct fault_config {
  uint64_t seed = 0;
  std::vector<fault_spec> specs;

  bool empty() const noexcept { return specs.empty(); }
  friend bool operator==(const fault_config&, const fault_config&) = default;
};

/// errc::invalid_argument naming the spec (its index) and the bad field: a probability outside
/// [0, 1], an empty step range, delay_steps 0, bits outside 1..64, a process fault without a
/// rank (kill_scheduler: with one), copy-only fields on other kinds, op= on a kind not fail_io.
status validate(const fault_spec& spec);
status validate(const fault_config& config);

/// The copy faults of `config` that concern `rank`, as the copy engine's rules (order kept),
/// with a seed of its own per rank so that the ranks' draws are independent.
fault_plan copy_fault_plan(const fault_config& config, rank_id rank);

/// The specs of `config` acting at `site`.
fault_config faults_at(const fault_config& config, fault_site site);
/// The specs of `config` a rank's worker applies: its copy faults and its file tier's (fail_io),
/// in order.
fault_config rank_faults(const fault_config& config);

std::string_view to_string(fault_kind k) noexcept;
std::string_view to_string(fault_site s) noexcept;

/// The deterministic uniform draw in [0, 1) for (seed, site, counter): a hash, so that a
/// decision never depends on the order of other draws.
double fault_draw(uint64_t seed, uint64_t site, uint64_t counter) noexcept;
/// splitmix64, the hash behind fault_draw (also derives per-rank seeds).
uint64_t fault_mix(uint64_t x) noexcept;

}  // namespace kvc
