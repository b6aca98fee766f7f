#include "proto/fault_plan.hpp"

#include <string>

namespace kvc {

status validate(const fault_plan& plan) {
  for (size_t i = 0; i < plan.rules.size(); ++i) {
    const fault_rule& r = plan.rules[i];
    const std::string where = "fault plan rule " + std::to_string(i) + ": ";
    if (r.action == fault_action::none) {
      return make_error(errc::invalid_argument, where + "action is none");
    }
    if (r.trigger == fault_trigger::probability &&
        !(r.probability >= 0.0 && r.probability <= 1.0)) {
      return make_error(errc::invalid_argument, where + "probability must be in [0, 1], got " +
                                                    std::to_string(r.probability));
    }
    if (r.release_after != 0 && r.action != fault_action::delay) {
      return make_error(errc::invalid_argument, where + "release_after needs action delay");
    }
  }
  return {};
}

std::string_view to_string(fault_target t) noexcept {
  switch (t) {
    case fault_target::any:
      return "any";
    case fault_target::store:
      return "store";
    case fault_target::load:
      return "load";
  }
  return "unknown_fault_target";
}

std::string_view to_string(fault_action a) noexcept {
  switch (a) {
    case fault_action::none:
      return "none";
    case fault_action::fail_at_submit:
      return "fail_at_submit";
    case fault_action::fail_at_completion:
      return "fail_at_completion";
    case fault_action::delay:
      return "delay";
  }
  return "unknown_fault_action";
}

}  // namespace kvc
