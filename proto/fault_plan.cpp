#include "proto/fault_plan.hpp"

#include <cmath>
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
    case fault_action::lose_device:
      return "lose_device";
  }
  return "unknown_fault_action";
}

// --- fault_config -------------------------------------------------------------------------------

uint64_t fault_mix(uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

double fault_draw(uint64_t seed, uint64_t site, uint64_t counter) noexcept {
  const uint64_t h = fault_mix(fault_mix(seed ^ fault_mix(site)) ^ counter);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

fault_site site_of(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::fail_copy:
    case fault_kind::delay_copy:
    case fault_kind::lose_device:
      return fault_site::copy;
    case fault_kind::kill_rank:
    case fault_kind::hang_rank:
    case fault_kind::kill_scheduler:
      return fault_site::process;
    case fault_kind::fail_io:
      return fault_site::tier;
    default:
      return fault_site::channel;
  }
}

status validate(const fault_spec& f) {
  const std::string kind{to_string(f.kind)};
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, "fault " + kind + ": " + why);
  };
  const fault_site site = site_of(f.kind);
  if (static_cast<size_t>(f.kind) >= fault_kind_count) return bad("unknown fault kind");
  if (site != fault_site::process) {
    if (f.trigger == fault_trigger::probability &&
        !(f.probability >= 0.0 && f.probability <= 1.0)) {
      return bad("p must be in [0, 1], got " + std::to_string(f.probability));
    }
  }
  if (f.first_step > f.last_step) {
    return bad("empty step range " + std::to_string(f.first_step) + "-" +
               std::to_string(f.last_step));
  }
  if (f.kind == fault_kind::delay_report) {
    if (f.delay_ms && f.delay_steps != 0) return bad("by= and ms= together (one of them)");
    if (f.delay_ms && *f.delay_ms == 0) return bad("ms must be >= 1");
    if (!f.delay_ms && f.delay_steps == 0) return bad("by must be >= 1");
  } else if (f.delay_ms) {
    return bad("ms= is for delay_report only");
  }
  if (f.kind == fault_kind::corrupt_frame && (f.bits == 0 || f.bits > 64)) {
    return bad("bits must be in [1, 64], got " + std::to_string(f.bits));
  }
  if (f.kind != fault_kind::fail_copy && f.at != fault_action::fail_at_submit) {
    return bad("at= is for fail_copy only");
  }
  if (f.kind == fault_kind::fail_copy && f.at != fault_action::fail_at_submit &&
      f.at != fault_action::fail_at_completion) {
    return bad("at must be submit or completion");
  }
  if (site != fault_site::copy && f.dir != fault_target::any) {
    return bad("dir= is for copy faults only");
  }
  if (f.kind != fault_kind::fail_io && f.op != fault_io_op::any) {
    return bad("op= is for fail_io only");
  }
  if (f.kind != fault_kind::delay_copy && f.release_after != 0) {
    return bad("after= is for delay_copy only");
  }
  if (f.kind != fault_kind::hang_rank && f.resume_ms) return bad("resume= is for hang_rank only");
  if (site == fault_site::process) {
    if (f.kind == fault_kind::kill_scheduler && f.rank) return bad("takes no rank");
    if (f.kind != fault_kind::kill_scheduler && !f.rank) return bad("needs rank=");
    if (f.first_step != f.last_step) return bad("needs one step=");
  }
  return {};
}

status validate(const fault_config& config) {
  for (size_t i = 0; i < config.specs.size(); ++i) {
    if (status s = validate(config.specs[i]); !s) {
      return make_error(errc::invalid_argument,
                        "fault spec " + std::to_string(i) + ": " + s.message());
    }
  }
  return {};
}

fault_plan copy_fault_plan(const fault_config& config, rank_id rank) {
  fault_plan plan;
  plan.seed = fault_mix(config.seed ^ fault_mix(0x636f7079ULL + rank));  // "copy" + rank
  for (const fault_spec& f : config.specs) {
    if (site_of(f.kind) != fault_site::copy || (f.rank && *f.rank != rank)) continue;
    fault_rule r;
    r.target = f.dir;
    r.trigger = f.trigger;
    r.nth = f.nth;
    r.probability = f.probability;
    r.action = f.kind == fault_kind::delay_copy    ? fault_action::delay
               : f.kind == fault_kind::lose_device ? fault_action::lose_device
                                                   : f.at;
    r.release_after = f.kind == fault_kind::delay_copy ? f.release_after : 0;
    r.max_fires = f.max_fires;
    plan.rules.push_back(r);
  }
  return plan;
}

fault_config faults_at(const fault_config& config, fault_site site) {
  fault_config out{config.seed, {}};
  for (const fault_spec& f : config.specs) {
    if (site_of(f.kind) == site) out.specs.push_back(f);
  }
  return out;
}

fault_config rank_faults(const fault_config& config) {
  fault_config out{config.seed, {}};
  for (const fault_spec& f : config.specs) {
    const fault_site site = site_of(f.kind);
    if (site == fault_site::copy || site == fault_site::tier) out.specs.push_back(f);
  }
  return out;
}

std::string_view to_string(fault_kind k) noexcept {
  switch (k) {
    case fault_kind::drop_report:
      return "drop_report";
    case fault_kind::duplicate_report:
      return "duplicate_report";
    case fault_kind::delay_report:
      return "delay_report";
    case fault_kind::reorder_reports:
      return "reorder_reports";
    case fault_kind::corrupt_frame:
      return "corrupt_frame";
    case fault_kind::fail_copy:
      return "fail_copy";
    case fault_kind::delay_copy:
      return "delay_copy";
    case fault_kind::kill_rank:
      return "kill_rank";
    case fault_kind::hang_rank:
      return "hang_rank";
    case fault_kind::kill_scheduler:
      return "kill_scheduler";
    case fault_kind::lose_device:
      return "lose_device";
    case fault_kind::fail_io:
      return "fail_io";
  }
  return "unknown_fault_kind";
}

std::string_view to_string(fault_site s) noexcept {
  switch (s) {
    case fault_site::channel:
      return "channel";
    case fault_site::copy:
      return "copy";
    case fault_site::process:
      return "process";
    case fault_site::tier:
      return "tier";
  }
  return "unknown_fault_site";
}

std::string_view to_string(fault_io_op op) noexcept {
  switch (op) {
    case fault_io_op::any:
      return "any";
    case fault_io_op::read:
      return "read";
    case fault_io_op::write:
      return "write";
  }
  return "unknown_fault_io_op";
}

}  // namespace kvc
