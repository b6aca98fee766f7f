#include "proto/fault_spec_parser.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>

namespace kvc {

namespace {

constexpr std::array<std::string_view, fault_kind_count> kind_names{
    "drop_report", "duplicate_report", "delay_report", "reorder_reports", "corrupt_frame",
    "fail_copy",   "delay_copy",       "kill_rank",    "hang_rank",       "kill_scheduler",
    "lose_device", "fail_io"};

constexpr std::array<std::string_view, 6> channel_keys{"rank", "step", "steps", "p", "nth", "max"};
constexpr std::array<std::string_view, 8> delay_report_keys{"rank", "step", "steps", "p",
                                                            "nth",  "max",  "by",   "ms"};
constexpr std::array<std::string_view, 7> corrupt_keys{"rank", "step", "steps", "p",
                                                       "nth",  "max",  "bits"};
constexpr std::array<std::string_view, 6> fail_copy_keys{"rank", "dir", "at", "p", "nth", "max"};
constexpr std::array<std::string_view, 6> delay_copy_keys{"rank", "dir", "after",
                                                          "p",    "nth", "max"};
constexpr std::array<std::string_view, 4> lose_device_keys{"rank", "dir", "p", "nth"};
constexpr std::array<std::string_view, 5> fail_io_keys{"rank", "op", "p", "nth", "max"};
constexpr std::array<std::string_view, 2> kill_rank_keys{"rank", "step"};
constexpr std::array<std::string_view, 3> hang_rank_keys{"rank", "step", "resume"};
constexpr std::array<std::string_view, 1> kill_scheduler_keys{"step"};

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (std::string_view n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  return out;
}

bool parse_uint(std::string_view v, uint64_t& out) {
  if (v.empty()) return false;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc{} && end == v.data() + v.size();
}

bool parse_double(std::string_view v, double& out) {
  if (v.empty()) return false;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc{} && end == v.data() + v.size() && std::isfinite(out);
}

std::string number(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

}  // namespace

std::span<const std::string_view> fault_kind_names() noexcept {
  return kind_names;
}

std::span<const std::string_view> fault_spec_keys(fault_kind kind) noexcept {
  switch (kind) {
    case fault_kind::drop_report:
    case fault_kind::duplicate_report:
    case fault_kind::reorder_reports:
      return channel_keys;
    case fault_kind::delay_report:
      return delay_report_keys;
    case fault_kind::corrupt_frame:
      return corrupt_keys;
    case fault_kind::fail_copy:
      return fail_copy_keys;
    case fault_kind::delay_copy:
      return delay_copy_keys;
    case fault_kind::kill_rank:
      return kill_rank_keys;
    case fault_kind::hang_rank:
      return hang_rank_keys;
    case fault_kind::kill_scheduler:
      return kill_scheduler_keys;
    case fault_kind::lose_device:
      return lose_device_keys;
    case fault_kind::fail_io:
      return fail_io_keys;
  }
  return {};
}

result<fault_spec> parse_fault_spec(std::string_view text) {
  const std::string quoted = "fault \"" + std::string(text) + "\": ";
  auto bad = [&](const std::string& why) {
    return make_error(errc::invalid_argument, quoted + why);
  };
  const size_t colon = text.find(':');
  const std::string_view kind_text = text.substr(0, colon);
  auto kind_it = std::find(kind_names.begin(), kind_names.end(), kind_text);
  if (kind_it == kind_names.end()) {
    return bad("unknown kind \"" + std::string(kind_text) + "\" (kinds: " + join(kind_names) + ")");
  }
  fault_spec f;
  f.kind = static_cast<fault_kind>(kind_it - kind_names.begin());
  const auto keys = fault_spec_keys(f.kind);
  const fault_site site = site_of(f.kind);
  std::set<std::string_view> seen;
  std::string_view rest =
      colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (colon != std::string_view::npos && rest.empty()) return bad("nothing after ':'");
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return bad("a trailing ','");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return bad("\"" + std::string(item) + "\" is not key=value");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const std::string k{key};
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return bad("unknown key \"" + k + "\" for " + std::string(kind_text) +
                 " (keys: " + join(keys) + ")");
    }
    if (!seen.insert(key).second) return bad("key \"" + k + "\" given twice");
    const std::string v{value};
    uint64_t n = 0;
    auto need_uint = [&]() -> status {
      if (!parse_uint(value, n)) return bad(k + "=" + v + " is not an unsigned integer");
      return {};
    };
    if (key == "rank") {
      if (auto s = need_uint(); !s) return s;
      if (n > UINT32_MAX) return bad("rank=" + v + " is out of range");
      f.rank = static_cast<rank_id>(n);
    } else if (key == "dir") {
      if (value == "store") {
        f.dir = fault_target::store;
      } else if (value == "load") {
        f.dir = fault_target::load;
      } else if (value == "any") {
        f.dir = fault_target::any;
      } else {
        return bad("dir=" + v + ": expected store, load or any");
      }
    } else if (key == "op") {
      if (value == "read") {
        f.op = fault_io_op::read;
      } else if (value == "write") {
        f.op = fault_io_op::write;
      } else if (value == "any") {
        f.op = fault_io_op::any;
      } else {
        return bad("op=" + v + ": expected read, write or any");
      }
    } else if (key == "at") {
      if (value == "submit") {
        f.at = fault_action::fail_at_submit;
      } else if (value == "completion") {
        f.at = fault_action::fail_at_completion;
      } else {
        return bad("at=" + v + ": expected submit or completion");
      }
    } else if (key == "step") {
      if (seen.count("steps") != 0) return bad("step= and steps= together");
      if (auto s = need_uint(); !s) return s;
      f.first_step = f.last_step = n;
    } else if (key == "steps") {
      if (seen.count("step") != 0) return bad("step= and steps= together");
      const size_t dash = value.find('-');
      uint64_t a = 0;
      uint64_t b = f.last_step;
      if (dash == std::string_view::npos || !parse_uint(value.substr(0, dash), a) ||
          (dash + 1 < value.size() && !parse_uint(value.substr(dash + 1), b))) {
        return bad("steps=" + v + ": expected A-B or A-");
      }
      f.first_step = a;
      f.last_step = b;
    } else if (key == "p") {
      if (seen.count("nth") != 0) return bad("p= and nth= together");
      if (!parse_double(value, f.probability)) return bad("p=" + v + " is not a number");
      f.trigger = fault_trigger::probability;
    } else if (key == "nth") {
      if (seen.count("p") != 0) return bad("p= and nth= together");
      if (auto s = need_uint(); !s) return s;
      f.nth = n;
      f.trigger = fault_trigger::nth;
    } else if (key == "max") {
      if (auto s = need_uint(); !s) return s;
      f.max_fires = n;
    } else if (key == "by") {
      if (auto s = need_uint(); !s) return s;
      f.delay_steps = n;
    } else if (key == "ms") {
      if (auto s = need_uint(); !s) return s;
      f.delay_ms = n;
      f.delay_steps = 0;
    } else if (key == "after") {
      if (auto s = need_uint(); !s) return s;
      f.release_after = n;
    } else if (key == "bits") {
      if (auto s = need_uint(); !s) return s;
      if (n > 64) return bad("bits=" + v + ": must be in [1, 64]");
      f.bits = static_cast<uint32_t>(n);
    } else if (key == "resume") {
      if (value != "never") {
        if (auto s = need_uint(); !s)
          return bad("resume=" + v + ": expected milliseconds or never");
        f.resume_ms = n;
      }
    }
  }
  if (site != fault_site::process && seen.count("p") == 0 && seen.count("nth") == 0) {
    return bad("needs p=X (each occurrence) or nth=N (one occurrence)");
  }
  if (site == fault_site::process && seen.count("step") == 0) return bad("needs step=N");
  if (f.kind == fault_kind::delay_report && (seen.count("by") != 0) == (seen.count("ms") != 0)) {
    return bad("needs exactly one of by=N (steps held) or ms=N (milliseconds held)");
  }
  if (f.kind != fault_kind::kill_scheduler && site == fault_site::process && !f.rank) {
    return bad("needs rank=N");
  }
  if (auto s = validate(f); !s) return bad(s.message());
  return f;
}

std::string format_fault_spec(const fault_spec& f) {
  std::string out{to_string(f.kind)};
  char sep = ':';
  auto add = [&](std::string_view key, const std::string& value) {
    out += sep;
    out += key;
    out += '=';
    out += value;
    sep = ',';
  };
  const fault_site site = site_of(f.kind);
  if (f.rank) add("rank", std::to_string(*f.rank));
  if (site == fault_site::copy && f.dir != fault_target::any) {
    add("dir", std::string(to_string(f.dir)));
  }
  if (f.kind == fault_kind::fail_io && f.op != fault_io_op::any) {
    add("op", std::string(to_string(f.op)));
  }
  if (f.kind == fault_kind::fail_copy && f.at == fault_action::fail_at_completion) {
    add("at", "completion");
  }
  if (site == fault_site::process) {
    add("step", std::to_string(f.first_step));
  } else if (site == fault_site::channel &&
             (f.first_step != 0 || f.last_step != std::numeric_limits<step_id>::max())) {
    if (f.first_step == f.last_step) {
      add("step", std::to_string(f.first_step));
    } else {
      add("steps",
          std::to_string(f.first_step) + "-" +
              (f.last_step == std::numeric_limits<step_id>::max() ? std::string{}
                                                                  : std::to_string(f.last_step)));
    }
  }
  if (site != fault_site::process) {
    if (f.trigger == fault_trigger::nth) {
      add("nth", std::to_string(f.nth));
    } else {
      add("p", number(f.probability));
    }
    if (f.max_fires != 0) add("max", std::to_string(f.max_fires));
  }
  if (f.kind == fault_kind::delay_report) {
    if (f.delay_ms) {
      add("ms", std::to_string(*f.delay_ms));
    } else {
      add("by", std::to_string(f.delay_steps));
    }
  }
  if (f.kind == fault_kind::delay_copy && f.release_after != 0) {
    add("after", std::to_string(f.release_after));
  }
  if (f.kind == fault_kind::corrupt_frame) add("bits", std::to_string(f.bits));
  if (f.kind == fault_kind::hang_rank) {
    add("resume", f.resume_ms ? std::to_string(*f.resume_ms) : std::string{"never"});
  }
  return out;
}

}  // namespace kvc
