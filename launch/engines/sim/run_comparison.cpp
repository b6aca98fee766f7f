#include "launch/engines/sim/run_comparison.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace kvc::sim {

namespace {

double ratio(double a, double b) {
  return b > 0 ? round3(a / b) : 0.0;
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
  out += table_line("requests compared", std::to_string(c.requests) + ", finished in both runs (" +
                                             finished(on_summary) + " vs " + finished(off_summary) +
                                             " finished)");
  out += table_line("prefill tokens computed", std::to_string(on.prefill_tokens_computed) + " vs " +
                                                   std::to_string(off.prefill_tokens_computed));
  out += table_line("prefill tokens saved", std::to_string(saved(c)));
  out +=
      table_line("ttft p50", fixed3(on.ttft_p50_ms) + " vs " + fixed3(off.ttft_p50_ms) + " ms (" +
                                 fixed3(ratio(off.ttft_p50_ms, on.ttft_p50_ms)) + "x)");
  out +=
      table_line("output tokens/s",
                 fixed3(on.output_tokens_per_s) + " vs " + fixed3(off.output_tokens_per_s) + " (" +
                     fixed3(ratio(on.output_tokens_per_s, off.output_tokens_per_s)) + "x)");
  out += table_line("simulated time", fixed3(on.sim_seconds) + " vs " + fixed3(off.sim_seconds) +
                                          " s (" + fixed3(ratio(off.sim_seconds, on.sim_seconds)) +
                                          "x)");
  return out;
}

nlohmann::json compare_json(const run_report& on, const run_report& off) {
  return compare_json(summary_json(on), summary_json(off),
                      compare_finished(on.finished, off.finished));
}

std::string compare_table(const run_report& on, const run_report& off) {
  return compare_table(summary_json(on), summary_json(off),
                       compare_finished(on.finished, off.finished));
}

nlohmann::json compare_tier_json(const run_report& with_tier, const run_report& pool_only) {
  const run_comparison c = compare_finished(with_tier.finished, pool_only.finished);
  return {{"event", "compare_tier"},
          {"pool_only", summary_json(pool_only)},
          {"requests_compared", c.requests},
          {"compared_tier", figures_json(c.on)},
          {"compared_pool_only", figures_json(c.off)},
          {"prefill_tokens_saved_by_tier", saved(c)},
          {"ttft_p50_ratio", ratio(c.off.ttft_p50_ms, c.on.ttft_p50_ms)}};
}

std::string compare_tier_table(const run_report& with_tier, const run_report& pool_only) {
  const run_comparison c = compare_finished(with_tier.finished, pool_only.finished);
  std::string out = "file tier vs CPU pool alone (same workload, simulated time)\n";
  out += table_line("requests compared", std::to_string(c.requests) + ", finished in both runs");
  out += table_line("prefill tokens computed", std::to_string(c.on.prefill_tokens_computed) +
                                                   " vs " +
                                                   std::to_string(c.off.prefill_tokens_computed));
  out += table_line("saved by the file tier", std::to_string(saved(c)));
  out += table_line("ttft p50", fixed3(c.on.ttft_p50_ms) + " vs " + fixed3(c.off.ttft_p50_ms) +
                                    " ms (" + fixed3(ratio(c.off.ttft_p50_ms, c.on.ttft_p50_ms)) +
                                    "x)");
  return out;
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
      return bad(at +
                 " is not [id, arrival_us, first_token_us, finish_us, output_tokens, "
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
    finished_request r{.id = e[0].get<std::string>(),
                       .arrival_us = e[1].get<double>(),
                       .first_token_us = e[2].get<double>(),
                       .finish_us = e[3].get<double>(),
                       .output_tokens = e[4].get<uint32_t>(),
                       .prefill_tokens = e[5].get<uint64_t>()};
    if (!ids.insert(r.id).second) return bad(at + ": request " + r.id + " is given twice");
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvc::sim
