#include "actors/metrics/exposition.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>

namespace kvc::metrics {

namespace {

bool name_char(char c, bool first, bool colon) {
  const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (alpha || (colon && c == ':')) return true;
  return !first && c >= '0' && c <= '9';
}

bool valid_name(std::string_view s, bool colon) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!name_char(s[i], i == 0, colon)) return false;
  }
  return true;
}

std::string escape_help(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string_view type_name(metric_type t) {
  switch (t) {
    case metric_type::counter:
      return "counter";
    case metric_type::gauge:
      return "gauge";
    case metric_type::histogram:
      return "histogram";
  }
  return "untyped";
}

/// The name samples carry: counters end in _total.
std::string sample_name(std::string_view name, metric_type type) {
  std::string out{name};
  if (type == metric_type::counter && !out.ends_with("_total")) out += "_total";
  return out;
}

void append_labels(std::string& out, const labels& lbl, const std::string* le) {
  if (lbl.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [k, v] : lbl) {
    if (!first) out += ',';
    first = false;
    out += k;
    out += "=\"";
    out += exposition::escape_label_value(v);
    out += '"';
  }
  if (le != nullptr) {
    if (!first) out += ',';
    out += "le=\"";
    out += *le;
    out += '"';
  }
  out += '}';
}

}  // namespace

bool exposition::valid_metric_name(std::string_view s) noexcept {
  return valid_name(s, /*colon=*/true);
}

bool exposition::valid_label_name(std::string_view s) noexcept {
  return valid_name(s, /*colon=*/false) && !s.starts_with("__");
}

std::string exposition::escape_label_value(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string exposition::format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Whole numbers (counters, byte counts, bucket bounds) as integers: 3000000, not 3e+06.
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

status exposition::add_family(std::string_view name, metric_type type, std::string_view help) {
  if (!valid_metric_name(name)) {
    return make_error(errc::invalid_argument,
                      "metrics: invalid metric name \"" + std::string{name} + "\"");
  }
  const std::string exposed = sample_name(name, type);
  for (const family& f : families_) {
    if (f.name == name || sample_name(f.name, f.type) == exposed) {
      return make_error(errc::invalid_argument,
                        "metrics: family \"" + std::string{name} + "\" declared twice");
    }
  }
  families_.push_back({std::string{name}, type, std::string{help}, {}});
  return status::success();
}

result<exposition::family*> exposition::find(std::string_view name, bool histogram_wanted) {
  for (family& f : families_) {
    if (f.name != name) continue;
    if ((f.type == metric_type::histogram) != histogram_wanted) {
      return make_error(errc::invalid_argument, "metrics: family \"" + std::string{name} +
                                                    "\" is a " + std::string{type_name(f.type)} +
                                                    ", the sample is not");
    }
    return &f;
  }
  return make_error(errc::not_found, "metrics: family \"" + std::string{name} + "\" not declared");
}

status exposition::check_labels(const labels& lbl, metric_type type) {
  for (size_t i = 0; i < lbl.size(); ++i) {
    const std::string& k = lbl[i].first;
    if (!valid_label_name(k) || (type == metric_type::histogram && k == "le")) {
      return make_error(errc::invalid_argument, "metrics: invalid label name \"" + k + "\"");
    }
    for (size_t j = 0; j < i; ++j) {
      if (lbl[j].first == k) {
        return make_error(errc::invalid_argument, "metrics: label \"" + k + "\" given twice");
      }
    }
  }
  return status::success();
}

status exposition::add_value(std::string_view name, const labels& lbl, double value) {
  auto f = find(name, /*histogram_wanted=*/false);
  if (!f) return f.error();
  if (auto st = check_labels(lbl, (*f)->type); !st) return st;
  std::string& out = (*f)->samples;
  out += sample_name(name, (*f)->type);
  append_labels(out, lbl, nullptr);
  out += ' ';
  out += format_value(value);
  out += '\n';
  return status::success();
}

status exposition::add_histogram(std::string_view name, const labels& lbl, const histogram& h) {
  auto f = find(name, /*histogram_wanted=*/true);
  if (!f) return f.error();
  if (auto st = check_labels(lbl, metric_type::histogram); !st) return st;
  std::string& out = (*f)->samples;
  const std::string base{name};
  uint64_t cumulative = 0;
  const auto bounds = h.bounds();
  const auto counts = h.counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds.size() ? format_value(bounds[i]) : "+Inf";
    out += base + "_bucket";
    append_labels(out, lbl, &le);
    out += ' ' + std::to_string(cumulative) + '\n';
  }
  out += base + "_sum";
  append_labels(out, lbl, nullptr);
  out += ' ' + format_value(h.sum()) + '\n';
  out += base + "_count";
  append_labels(out, lbl, nullptr);
  out += ' ' + std::to_string(h.count()) + '\n';
  return status::success();
}

std::string exposition::render() const {
  std::string out;
  for (const family& f : families_) {
    const std::string exposed = sample_name(f.name, f.type);
    out += "# HELP " + exposed + ' ' + escape_help(f.help) + '\n';
    out += "# TYPE " + exposed + ' ' + std::string{type_name(f.type)} + '\n';
    out += f.samples;
  }
  return out;
}

}  // namespace kvc::metrics
