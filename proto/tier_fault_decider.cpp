#include "proto/tier_fault_decider.hpp"

#include <cassert>
#include <utility>

namespace kvc {

result<tier_fault_decider> tier_fault_decider::make(const fault_config& config, rank_id rank) {
  if (status s = validate(config); !s) return s;
  std::vector<fault_spec> specs;
  for (const fault_spec& f : faults_at(config, fault_site::tier).specs) {
    if (!f.rank || *f.rank == rank) specs.push_back(f);
  }
  return tier_fault_decider{fault_mix(config.seed ^ fault_mix(0x74696572ULL + rank)),  // "tier"
                            std::move(specs)};
}

bool tier_fault_decider::next(fault_io_op op) {
  assert(op != fault_io_op::any);
  bool failed = false;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const fault_spec& f = specs_[i];
    if (f.op != fault_io_op::any && f.op != op) continue;
    const uint64_t ordinal = seen_[i]++;
    if (failed || (f.max_fires != 0 && fires_[i] >= f.max_fires)) continue;
    const bool fire = f.trigger == fault_trigger::nth
                          ? ordinal == f.nth
                          : fault_draw(seed_, i, ordinal) < f.probability;
    if (!fire) continue;
    ++fires_[i];
    ++fired_;
    failed = true;
  }
  return failed;
}

}  // namespace kvc
