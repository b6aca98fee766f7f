#include "cuda/fault_injector.hpp"

#include <cassert>
#include <utility>

namespace kvc::cuda {

result<fault_injector> fault_injector::make(fault_plan plan) {
  if (status s = validate(plan); !s) return s;
  return fault_injector(std::move(plan));
}

fault_injector::fault_injector(fault_plan plan)
    : plan_(std::move(plan)), fired_(plan_.rules.size(), 0) {}

double fault_injector::draw(uint64_t seed, size_t rule, uint64_t ordinal) noexcept {
  return fault_draw(seed, rule, ordinal);
}

fault_injector::decision fault_injector::next(fault_target dir) {
  assert(dir != fault_target::any);
  decision d;
  for (size_t i = 0; i < plan_.rules.size() && d.rule < 0; ++i) {
    const fault_rule& r = plan_.rules[i];
    if (r.target != fault_target::any && r.target != dir) continue;
    if (r.max_fires != 0 && fired_[i] >= r.max_fires) continue;
    const uint64_t ordinal = seen_[static_cast<size_t>(r.target)];
    const bool fire = r.trigger == fault_trigger::nth
                          ? ordinal == r.nth
                          : draw(plan_.seed, i, ordinal) < r.probability;
    if (!fire) continue;
    ++fired_[i];
    d = decision{r.action, static_cast<int>(i), ordinal, r.release_after};
  }
  ++seen_[static_cast<size_t>(fault_target::any)];
  ++seen_[static_cast<size_t>(dir)];
  return d;
}

}  // namespace kvc::cuda
