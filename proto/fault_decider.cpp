#include "proto/fault_decider.hpp"

#include <utility>

namespace kvc {

result<fault_decider> fault_decider::make(const fault_config& config, fault_site site) {
  if (status s = validate(config); !s) return s;
  return fault_decider{faults_at(config, site)};
}

std::optional<fault_decider::firing> fault_decider::next(rank_id rank, step_id step) {
  std::optional<firing> out;
  for (size_t i = 0; i < config_.specs.size(); ++i) {
    const fault_spec& f = config_.specs[i];
    if ((f.rank && *f.rank != rank) || step < f.first_step || step > f.last_step) continue;
    const uint64_t ordinal = seen_[i]++;
    if (out || (f.max_fires != 0 && fires_[i] >= f.max_fires)) continue;
    const bool fire = f.trigger == fault_trigger::nth
                          ? ordinal == f.nth
                          : fault_draw(config_.seed, i, ordinal) < f.probability;
    if (!fire) continue;
    ++fires_[i];
    ++fired_[static_cast<size_t>(f.kind)];
    out = firing{i, f.kind, ordinal};
  }
  return out;
}

double fault_decider::draw(const firing& f, uint64_t k) const noexcept {
  // A site of its own per firing: the spec's draws use sites 0..n-1.
  return fault_draw(fault_mix(config_.seed ^ f.ordinal), config_.specs.size() + f.spec, k);
}

}  // namespace kvc
