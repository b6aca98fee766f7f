#include "launch/sim_engine/run_comparison.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace kvc::sim {

namespace {

double round3(double v) {
  return std::round(v * 1000) / 1000;
}

double ratio(double a, double b) {
  return b > 0 ? round3(a / b) : 0.0;
}

std::string line(const char* name, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "  %-26s %s\n", name, value.c_str());
  return buf;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

/// One run's figures over its requests in `pick` (the compared ones).
compared_figures figures_of(const std::vector<const finished_request*>& pick) {
  compared_figures f;
  std::vector<double> ttft;
  ttft.reserve(pick.size());
  double end_us = 0;
  for (const finished_request* r : pick) {
    f.prefill_tokens_computed += r->prefill_tokens;
    f.output_tokens += r->output_tokens;
    ttft.push_back(r->ttft_us());
    end_us = std::max(end_us, r->finish_us);
  }
  f.ttft_p50_ms = percentile(ttft, 50) / 1000.0;
  f.sim_seconds = end_us / 1e6;
  f.output_tokens_per_s =
      f.sim_seconds > 0 ? static_cast<double>(f.output_tokens) / f.sim_seconds : 0.0;
  return f;
}

nlohmann::json figures_json(const compared_figures& f) {
  return {{"prefill_tokens_computed", f.prefill_tokens_computed},
          {"output_tokens", f.output_tokens},
          {"ttft_p50_ms", round3(f.ttft_p50_ms)},
          {"sim_seconds", round3(f.sim_seconds)},
          {"output_tokens_per_s", round3(f.output_tokens_per_s)}};
}

int64_t saved(const run_comparison& c) {
  return static_cast<int64_t>(c.off.prefill_tokens_computed) -
         static_cast<int64_t>(c.on.prefill_tokens_computed);
}

}  // namespace

run_comparison compare_finished(std::span<const finished_request> on,
                                std::span<const finished_request> off) {
  std::unordered_map<std::string_view, const finished_request*> off_by_id;
  off_by_id.reserve(off.size());
  for (const auto& r : off) off_by_id.emplace(r.id, &r);
  std::vector<const finished_request*> on_pick;
  std::vector<const finished_request*> off_pick;
  for (const auto& r : on) {
    const auto it = off_by_id.find(r.id);
    if (it == off_by_id.end()) continue;
    on_pick.push_back(&r);
    off_pick.push_back(it->second);
  }
  return {on_pick.size(), figures_of(on_pick), figures_of(off_pick)};
}

nlohmann::json compare_json(const nlohmann::json& on_summary, const nlohmann::json& off_summary,
                            const run_comparison& c) {
  return {{"event", "compare"},
          {"offload_on", on_summary},
          {"offload_off", off_summary},
          {"requests_compared", c.requests},
          {"compared_on", figures_json(c.on)},
          {"compared_off", figures_json(c.off)},
          {"prefill_tokens_saved", saved(c)},
          {"ttft_p50_ratio", ratio(c.off.ttft_p50_ms, c.on.ttft_p50_ms)},
          {"throughput_ratio", ratio(c.on.output_tokens_per_s, c.off.output_tokens_per_s)},
          {"sim_time_ratio", ratio(c.off.sim_seconds, c.on.sim_seconds)}};
}

std::string compare_table(const nlohmann::json& on_summary, const nlohmann::json& off_summary,
                          const run_comparison& c) {
  auto finished = [](const nlohmann::json& s) {
    const auto it = s.find("requests_finished");
    return it != s.end() ? it->dump() : std::string("?");
  };
  const compared_figures& on = c.on;
  const compared_figures& off = c.off;
  std::string out = "offload on vs off (same workload, simulated time)\n";
  out += line("requests compared", std::to_string(c.requests) + ", finished in both runs (" +
                                       finished(on_summary) + " vs " + finished(off_summary) +
                                       " finished)");
  out += line("prefill tokens computed", std::to_string(on.prefill_tokens_computed) + " vs " +
                                             std::to_string(off.prefill_tokens_computed));
  out += line("prefill tokens saved", std::to_string(saved(c)));
  out += line("ttft p50", num(on.ttft_p50_ms) + " vs " + num(off.ttft_p50_ms) + " ms (" +
                              num(ratio(off.ttft_p50_ms, on.ttft_p50_ms)) + "x)");
  out += line("output tokens/s",
              num(on.output_tokens_per_s) + " vs " + num(off.output_tokens_per_s) + " (" +
                  num(ratio(on.output_tokens_per_s, off.output_tokens_per_s)) + "x)");
  out += line("simulated time", num(on.sim_seconds) + " vs " + num(off.sim_seconds) + " s (" +
                                    num(ratio(off.sim_seconds, on.sim_seconds)) + "x)");
  return out;
}

nlohmann::json compare_json(const run_report& on, const run_report& off) {
  return compare_json(summary_json(on), summary_json(off), compare_finished(on.finished, off.finished));
}

std::string compare_table(const run_report& on, const run_report& off) {
  return compare_table(summary_json(on), summary_json(off),
                       compare_finished(on.finished, off.finished));
}

nlohmann::json finished_json(std::span<const finished_request> finished) {
  nlohmann::json requests = nlohmann::json::array();
  for (const auto& r : finished) {
    requests.push_back(
        {r.id, r.arrival_us, r.first_token_us, r.finish_us, r.output_tokens, r.prefill_tokens});
  }
  return {{"event", "finished"}, {"requests", std::move(requests)}};
}

result<std::vector<finished_request>> finished_from_json(const nlohmann::json& line) {
  auto bad = [](const std::string& why) {
    return make_error(errc::invalid_argument, "finished requests: " + why);
  };
  const auto it = line.is_object() ? line.find("requests") : line.end();
  if (it == line.end() || !it->is_array()) return bad("no \"requests\" array");
  std::vector<finished_request> out;
  out.reserve(it->size());
  std::unordered_set<std::string> ids;
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& e = (*it)[i];
    const std::string at = "entry " + std::to_string(i);
    if (!e.is_array() || e.size() != 6 || !e[0].is_string()) {
      return bad(at + " is not [id, arrival_us, first_token_us, finish_us, output_tokens, "
                      "prefill_tokens]");
    }
    for (size_t k = 1; k < 4; ++k) {
      if (!e[k].is_number() || !(e[k].get<double>() >= 0)) {
        return bad(at + ": a time is not a number >= 0");
      }
    }
    if (!e[4].is_number_unsigned() || !e[5].is_number_unsigned() ||
        e[4].get<uint64_t>() > UINT32_MAX) {
      return bad(at + ": a token count is not a count");
    }
    finished_request r{e[0].get<std::string>(), e[1].get<double>(),         e[2].get<double>(),
                       e[3].get<double>(),      e[4].get<uint32_t>(),       e[5].get<uint64_t>()};
    if (!ids.insert(r.id).second) return bad(at + ": request " + r.id + " is given twice");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvc::sim
