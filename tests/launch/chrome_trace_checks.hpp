#pragma once
/// Structure checks of a Chrome trace-event document (launch/trace/chrome_trace.hpp), shared by the
/// unit and multi-process tests: every flow start has exactly one end with its id, no flow ends
/// before it starts, complete slices nest on each track, timestamps never go back on a track.
/// Each returns the problems found (empty: none).
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvc::launch::testing {

inline std::vector<std::string> check_chrome_trace(const nlohmann::json& doc) {
  std::vector<std::string> problems;
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    return {"no traceEvents array"};
  }
  std::map<uint64_t, double> starts, ends;
  std::map<std::pair<int, int>, double> last_ts;
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> open;  // slice stacks
  constexpr double slack = 1e-6;  // µs: rounding of ns / 1000 in doubles
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "M") continue;
    const auto track = std::make_pair(e.at("pid").get<int>(), e.at("tid").get<int>());
    const double ts = e.at("ts");
    if (auto it = last_ts.find(track); it != last_ts.end() && ts + slack < it->second) {
      problems.push_back("timestamps go back on track " + std::to_string(track.first) + "/" +
                         std::to_string(track.second));
    }
    last_ts[track] = ts;
    if (ph == "s" || ph == "f") {
      const uint64_t id = e.at("id");
      auto& seen = ph == "s" ? starts : ends;
      if (!seen.emplace(id, ts).second)
        problems.push_back("flow id repeated: " + std::to_string(id));
      if (e.value("bind_id", uint64_t{0}) != id) problems.push_back("flow without its bind_id");
    }
    if (ph == "X") {
      const double end = ts + e.at("dur").get<double>();
      auto& stack = open[track];
      while (!stack.empty() && stack.back().second < ts + slack && stack.back().second < end) {
        stack.pop_back();  // ended before this one starts
      }
      if (!stack.empty() && end > stack.back().second + slack) {
        problems.push_back("slice '" + e.at("name").get<std::string>() +
                           "' overlaps its enclosing slice on track " +
                           std::to_string(track.first) + "/" + std::to_string(track.second));
      }
      stack.emplace_back(ts, end);
    }
  }
  for (const auto& [id, ts] : starts) {
    auto it = ends.find(id);
    if (it == ends.end()) {
      problems.push_back("flow " + std::to_string(id) + " has no end");
    } else if (it->second + slack < ts) {
      problems.push_back("flow " + std::to_string(id) + " ends before it starts");
    }
  }
  for (const auto& [id, ts] : ends) {
    if (!starts.count(id)) problems.push_back("flow " + std::to_string(id) + " has no start");
  }
  return problems;
}

}  // namespace kvc::launch::testing
