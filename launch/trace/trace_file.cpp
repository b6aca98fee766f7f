#include "launch/trace/trace_file.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvc::launch {

namespace {

using json = nlohmann::json;

/// An integer field, refused unless its value lies in [lo, hi] (hi at most T's maximum): a value
/// the field's type cannot hold is named, never wrapped.
template <class T>
bool read_int(const json& j, const char* key, T& out, bool required, std::string& why,
              int64_t lo = std::numeric_limits<T>::min(),
              uint64_t hi = std::numeric_limits<T>::max()) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) why = std::string{"no \""} + key + "\"";
    return !required;
  }
  if (!it->is_number_integer()) {
    why = std::string{"\""} + key + "\" is not an integer";
    return false;
  }
  const bool fits = it->is_number_unsigned() ? it->get<uint64_t>() <= hi : it->get<int64_t>() >= lo;
  if (!fits) {
    why = std::string{"\""} + key + "\" is " + it->dump() + ", out of range [" +
          std::to_string(lo) + ", " + std::to_string(hi) + "]";
    return false;
  }
  out = it->get<T>();
  return true;
}

bool read_text(const json& j, const char* key, std::string& out, bool required, std::string& why) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) why = std::string{"no \""} + key + "\"";
    return !required;
  }
  if (!it->is_string()) {
    why = std::string{"\""} + key + "\" is not a string";
    return false;
  }
  out = it->get<std::string>();
  return true;
}

}  // namespace

result<trace::trace_record> parse_record(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return make_error(errc::invalid_argument, "not a JSON object");
  }
  trace::trace_record r;
  std::string why;
  std::string dir;
  const uint64_t t_max = max_trace_ns;
  const bool ok =
      read_int(j, "wall_ns", r.wall_ns, true, why, 0, t_max) &&
      read_int(j, "mono_ns", r.mono_ns, true, why, 0, t_max) &&
      read_int(j, "dur_ns", r.dur_ns, false, why, 0, t_max) &&
      read_int(j, "node", r.node, true, why) && read_int(j, "pid", r.pid, true, why, 0) &&
      read_text(j, "role", r.role, true, why) && read_text(j, "track", r.track, true, why) &&
      read_text(j, "dir", dir, true, why) && read_text(j, "type", r.type, true, why) &&
      read_int(j, "step", r.step, false, why, -1) && read_int(j, "rank", r.rank, false, why, -1) &&
      read_int(j, "job", r.job, false, why, -1) && read_text(j, "request", r.request, false, why) &&
      read_int(j, "bytes", r.bytes, false, why) && read_text(j, "msg", r.msg, false, why) &&
      read_int(j, "value", r.value, false, why, -1) && read_text(j, "note", r.note, false, why);
  if (!ok) return make_error(errc::invalid_argument, why);
  if (dir == "send") {
    r.dir = trace::direction::send;
  } else if (dir == "receive") {
    r.dir = trace::direction::receive;
  } else if (dir == "local") {
    r.dir = trace::direction::local;
  } else {
    return make_error(errc::invalid_argument, "\"dir\" is not send, receive or local");
  }
  if (r.type.empty()) return make_error(errc::invalid_argument, "\"type\" is empty");
  if (r.dur_ns > r.mono_ns) {
    return make_error(errc::invalid_argument,
                      "\"dur_ns\" " + std::to_string(r.dur_ns) + " is longer than \"mono_ns\" " +
                          std::to_string(r.mono_ns) + ": the span would begin before its clock");
  }
  return r;
}

result<trace_set> read_trace_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it{dir, ec}, end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".jsonl") continue;
    const bool regular = it->is_regular_file(ec);
    if (ec) {
      return make_error(errc::io_error,
                        "trace: cannot read " + it->path().string() + ": " + ec.message());
    }
    if (regular) files.push_back(it->path());
  }
  if (ec) return make_error(errc::io_error, "trace: cannot read " + dir + ": " + ec.message());
  if (files.empty()) return make_error(errc::not_found, "trace: no *.jsonl trace files in " + dir);
  std::sort(files.begin(), files.end());
  // Schedulers first, so that process 0 is the scheduler's (the reference clock).
  std::stable_partition(files.begin(), files.end(), [](const fs::path& p) {
    return p.filename().string().rfind("scheduler", 0) == 0;
  });

  trace_set out;
  std::map<std::pair<uint32_t, int64_t>, uint32_t> index;  // (node, pid) -> process
  // Per process: its first record's wall - mono clock offset, and where that record is.
  std::vector<std::pair<int64_t, std::string>> first_clock;
  for (const auto& path : files) {
    std::ifstream in{path};
    if (!in) return make_error(errc::io_error, "trace: cannot open " + path.string());
    std::string line;
    size_t number = 0;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(std::move(line));
    if (in.bad()) return make_error(errc::io_error, "trace: cannot read " + path.string());
    const bool ends_with_newline = [&] {
      std::ifstream tail{path, std::ios::binary | std::ios::ate};
      const auto size = tail.tellg();
      if (size <= 0) return true;
      tail.seekg(-1, std::ios::end);
      return tail.get() == '\n';
    }();
    for (const auto& l : lines) {
      ++number;
      if (l.empty()) continue;
      const std::string where = path.string() + ":" + std::to_string(number);
      auto r = parse_record(l);
      if (!r) {
        if (number == lines.size() && !ends_with_newline) {
          ++out.cut_lines;  // the writer was killed mid-line
          continue;
        }
        return make_error(errc::invalid_argument, "trace: " + where + ": " + r.error().message());
      }
      const auto key = std::make_pair(r->node, r->pid);
      auto [it, fresh] = index.try_emplace(key, static_cast<uint32_t>(out.processes.size()));
      const int64_t clock = r->wall_ns - r->mono_ns;  // both in [0, max_trace_ns]: no overflow
      if (fresh) {
        out.processes.push_back({r->node, r->pid, r->role});
        first_clock.emplace_back(clock, where);
      } else if (const auto& [first, first_at] = first_clock[it->second];
                 clock - first > max_wall_clock_step || first - clock > max_wall_clock_step) {
        return make_error(errc::invalid_argument,
                          "trace: " + where + ": \"wall_ns\" " + std::to_string(r->wall_ns) +
                              " is " + std::to_string((clock - first) / 1'000'000'000) +
                              " s away from the wall clock of the process's first record (" +
                              first_at + "), more than a day: one of the two is not a time " +
                              "the process wrote");
      }
      out.records.push_back({std::move(r).value(), it->second});
    }
  }
  return out;
}

}  // namespace kvc::launch
