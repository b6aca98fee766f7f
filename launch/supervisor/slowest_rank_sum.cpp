#include "launch/supervisor/slowest_rank_sum.hpp"

#include <algorithm>

namespace kvc::launch {

slowest_rank_sum::slowest_rank_sum(const std::vector<rank_id>& ranks) {
  for (rank_id r : ranks) last_.emplace(r, 0);  // steps count from 1: 0 is "none sent yet"
}

void slowest_rank_sum::add(rank_id rank, step_id step, uint64_t ns) {
  auto it = last_.find(rank);
  if (it == last_.end() || step <= folded_through_) return;
  it->second = std::max(it->second, step);
  auto& slowest = open_[step];
  slowest = std::max(slowest, ns);
  fold();
}

void slowest_rank_sum::fold() {
  step_id through = UINT64_MAX;
  for (const auto& [rank, step] : last_) through = std::min(through, step);
  if (last_.empty() || through <= folded_through_) return;
  while (!open_.empty() && open_.begin()->first <= through) {
    total_ += static_cast<double>(open_.begin()->second);
    open_.erase(open_.begin());
  }
  folded_through_ = through;
}

void slowest_rank_sum::finish() {
  for (const auto& [step, ns] : open_) {
    total_ += static_cast<double>(ns);
    folded_through_ = std::max(folded_through_, step);
  }
  open_.clear();
}

double launch_connector_share(double scheduler_ns, double ranks_ns, double sim_seconds) {
  if (sim_seconds <= 0) return 0;
  return (scheduler_ns + ranks_ns) / (sim_seconds * 1e9);
}

}  // namespace kvc::launch
