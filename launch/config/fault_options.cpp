#include "launch/config/fault_options.hpp"

#include <algorithm>

#include "launch/config/did_you_mean.hpp"
#include "proto/fault_spec_parser.hpp"

namespace kvc::launch {

namespace {

/// "; did you mean X?" for the kind or the first key of `text` that is unknown, else "".
std::string hint(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view kind_text = text.substr(0, colon);
  const auto kinds = fault_kind_names();
  const auto kind = std::find(kinds.begin(), kinds.end(), kind_text);
  if (kind == kinds.end()) {
    const std::string near = closest_name(kind_text, kinds);
    return near.empty() ? "" : "; did you mean \"" + near + "\"?";
  }
  if (colon == std::string_view::npos) return "";
  const auto keys = fault_spec_keys(static_cast<fault_kind>(kind - kinds.begin()));
  std::string_view rest = text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    const std::string_view key = item.substr(0, item.find('='));
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    const std::string near = closest_name(key, keys);
    return near.empty() ? "" : "; did you mean \"" + near + "\"?";
  }
  return "";
}

std::vector<std::string> texts(const std::vector<fault_spec>& of) {
  std::vector<std::string> out;
  for (const fault_spec& f : of) out.push_back(format_fault_spec(f));
  return out;
}

}  // namespace

result<fault_spec> parse_fault_option(std::string_view text) {
  auto f = parse_fault_spec(text);
  if (f) return f;
  return make_error(f.error().code(), f.error().message() + hint(text));
}

result<fault_config> parse_fault_options(std::span<const std::string> texts, uint64_t seed) {
  fault_config c{.seed = seed, .specs = {}};
  for (const std::string& t : texts) {
    auto f = parse_fault_option(t);
    if (!f) return f.error();
    c.specs.push_back(*f);
  }
  return c;
}

std::vector<std::string> scheduler_fault_specs(const fault_config& faults) {
  std::vector<fault_spec> reported;
  for (const fault_spec& f : faults.specs) {
    if (site_of(f.kind) != fault_site::process) reported.push_back(f);
  }
  return texts(reported);
}

std::vector<std::string> worker_fault_specs(const fault_config& faults, rank_id rank) {
  std::vector<fault_spec> mine;
  for (const fault_spec& f : faults.specs) {
    const fault_site site = site_of(f.kind);
    if ((site == fault_site::copy || site == fault_site::tier) && (!f.rank || *f.rank == rank)) {
      mine.push_back(f);
    }
  }
  return texts(mine);
}

std::string fault_override(const std::vector<std::string>& specs) {
  std::string out = "runtime.faults=[";
  bool first = true;
  for (const std::string& spec : specs) {
    if (!first) out += ", ";
    first = false;
    out += '"';
    for (char c : spec) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  return out + "]";
}

}  // namespace kvc::launch
