#include "launch/supervisor/process_faults.hpp"

#include <algorithm>
#include <string>

#include "proto/fault_spec_parser.hpp"

namespace kvc::launch {

fault_kind kind_of(const process_action& a) noexcept {
  switch (a.action) {
    case process_action::what::kill_rank:
      return fault_kind::kill_rank;
    case process_action::what::stop_rank:
      return fault_kind::hang_rank;
    case process_action::what::kill_scheduler:
      return fault_kind::kill_scheduler;
  }
  return fault_kind::kill_rank;
}

result<process_fault_schedule> process_fault_schedule::create(const fault_config& config,
                                                              std::span<const rank_id> node_ranks) {
  process_fault_schedule s;
  for (size_t i = 0; i < config.specs.size(); ++i) {
    const fault_spec& f = config.specs[i];
    if (site_of(f.kind) != fault_site::process) continue;
    const std::string name = "fault " + std::to_string(i) + " (" + format_fault_spec(f) + ")";
    if (auto st = validate(f); !st) return make_error(errc::invalid_argument, st.message());
    process_action a{.action = process_action::what::kill_rank,
                     .rank = 0,
                     .resume_ms = std::nullopt,
                     .spec = i,
                     .step = f.first_step};
    if (f.kind == fault_kind::kill_scheduler) {
      a.action = process_action::what::kill_scheduler;
    } else {
      if (std::find(node_ranks.begin(), node_ranks.end(), *f.rank) == node_ranks.end()) {
        return make_error(errc::invalid_argument,
                          name + ": rank " + std::to_string(*f.rank) +
                              " is not on node 0; only node 0's launcher carries out process "
                              "faults");
      }
      a.rank = *f.rank;
      if (f.kind == fault_kind::hang_rank) {
        a.action = process_action::what::stop_rank;
        a.resume_ms = f.resume_ms;
      }
    }
    s.pending_.push_back(a);
  }
  std::stable_sort(
      s.pending_.begin(), s.pending_.end(),
      [](const process_action& x, const process_action& y) { return x.step < y.step; });
  return s;
}

std::vector<process_action> process_fault_schedule::due(step_id step) {
  std::vector<process_action> out;
  while (next_ < pending_.size() && pending_[next_].step <= step) out.push_back(pending_[next_++]);
  return out;
}

}  // namespace kvc::launch
