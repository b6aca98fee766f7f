#pragma once
/// The `--fault SPEC` / `--fault-seed N` options and the config's runtime.faults /
/// runtime.fault_seed as a fault_config (proto/fault_plan.hpp, docs/faults.md), and what a
/// launcher forwards of it to each process: the channel's faults to the scheduler (applied at
/// its end of the step channel), a rank's copy faults to that rank's worker. Process faults
/// (kill_rank, hang_rank, kill_scheduler) are the launcher's own. Pure functions; thread-safe.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/fault_plan.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// parse_fault_spec, with "did you mean" for a misspelt kind or key.
result<fault_spec> parse_fault_option(std::string_view text);

/// Every spec of `texts` with `seed`; the first bad one is the error.
result<fault_config> parse_fault_options(std::span<const std::string> texts, uint64_t seed);

/// The `--set` override that makes `specs` (a command's --fault options) the config's
/// runtime.faults: `runtime.faults=["spec", ...]`, each a YAML double-quoted string.
std::string fault_override(const std::vector<std::string>& specs);

/// The faults (as --fault specs) concerning the scheduler process: the channel's, which it
/// injects, and the copy faults, which it does not inject but which make it print the run's
/// fault report (the coordinator's counts, the invariants); empty when there are none.
std::vector<std::string> scheduler_fault_specs(const fault_config& faults);
/// The same for rank `rank`'s worker process (its copy and fail_io faults: rank=`rank` or every
/// rank).
std::vector<std::string> worker_fault_specs(const fault_config& faults, rank_id rank);

}  // namespace kvc::launch
