#include "launch/trace/trace_summary.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <spdlog/fmt/fmt.h>

#include "launch/trace/chrome_trace.hpp"

namespace kvc::launch {

namespace {

using trace::direction;

/// Times on the reference clock of the four points of (step, rank).
struct rank_points {
  int64_t meta_sent = -1;
  int64_t meta_received = -1;
  int64_t report_sent = -1;
  int64_t report_received = -1;
};

percentiles percentiles_of(std::vector<int64_t> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&v](double q) {
    size_t i = static_cast<size_t>(q * static_cast<double>(v.size()));
    if (i > 0 && static_cast<double>(i) == q * static_cast<double>(v.size())) --i;
    return v[std::min(i, v.size() - 1)];
  };
  return {at(0.50), at(0.99), v.back()};
}

template <class... A>
void append(std::string& out, fmt::format_string<A...> f, A&&... a) {
  fmt::format_to(std::back_inserter(out), f, std::forward<A>(a)...);
}

double ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

}  // namespace

run_summary summarize_steps(const trace_set& set) {
  const auto offset = estimate_set_offsets(set, link_messages(set));
  std::map<int64_t, std::map<int64_t, rank_points>> points;  // step -> rank -> points
  std::map<int64_t, int64_t> applied;                        // step -> output applied
  for (const auto& tr : set.records) {
    const auto& r = tr.record;
    if (r.step < 0) continue;
    const int64_t t = r.mono_ns + offset[tr.process];
    if (r.type == "output_applied") {
      applied.try_emplace(r.step, t);
      continue;
    }
    if (r.rank < 0) continue;
    auto keep_first = [t](int64_t& slot) {
      if (slot < 0) slot = t;
    };
    if (r.type == "metadata" && r.dir == direction::send)
      keep_first(points[r.step][r.rank].meta_sent);
    if (r.type == "metadata" && r.dir == direction::receive) {
      keep_first(points[r.step][r.rank].meta_received);
    }
    if (r.type == "report" && r.dir == direction::send)
      keep_first(points[r.step][r.rank].report_sent);
    if (r.type == "report" && r.dir == direction::receive) {
      keep_first(points[r.step][r.rank].report_received);
    }
  }

  run_summary out;
  std::vector<int64_t> totals, deliveries, handlings, returns, aggregates;
  std::map<int64_t, std::pair<int64_t, uint64_t>> per_rank;  // rank -> (sum, count)
  std::map<int64_t, uint64_t> last_counts;
  for (const auto& [step, ranks] : points) {
    auto done = applied.find(step);
    if (done == applied.end()) continue;
    step_summary s;
    s.step = step;
    int64_t first_sent = -1;
    int64_t last_received = -1;
    int64_t worst_delivery = 0, worst_handling = 0, worst_return = 0;
    for (const auto& [rank, p] : ranks) {
      if (p.meta_sent >= 0 && (first_sent < 0 || p.meta_sent < first_sent))
        first_sent = p.meta_sent;
      if (p.meta_sent < 0 || p.meta_received < 0 || p.report_sent < 0 || p.report_received < 0) {
        continue;
      }
      rank_phases ph{rank, p.meta_received - p.meta_sent, p.report_sent - p.meta_received,
                     p.report_received - p.report_sent};
      worst_delivery = std::max(worst_delivery, ph.delivery_ns);
      worst_handling = std::max(worst_handling, ph.handling_ns);
      worst_return = std::max(worst_return, ph.return_ns);
      auto& acc = per_rank[rank];
      acc.first += ph.delivery_ns + ph.handling_ns + ph.return_ns;
      ++acc.second;
      if (p.report_received > last_received) {
        last_received = p.report_received;
        s.last_rank = rank;
      }
      s.ranks.push_back(ph);
    }
    if (first_sent < 0 || s.ranks.empty()) continue;
    s.total_ns = done->second - first_sent;
    s.aggregate_ns = done->second - last_received;
    totals.push_back(s.total_ns);
    deliveries.push_back(worst_delivery);
    handlings.push_back(worst_handling);
    returns.push_back(worst_return);
    aggregates.push_back(s.aggregate_ns);
    ++last_counts[s.last_rank];
    out.steps.push_back(std::move(s));
  }
  out.total = percentiles_of(totals);
  out.delivery = percentiles_of(deliveries);
  out.handling = percentiles_of(handlings);
  out.ret = percentiles_of(returns);
  out.aggregate = percentiles_of(aggregates);
  for (const auto& [rank, acc] : per_rank) {
    out.slowest.push_back({rank, acc.first / static_cast<int64_t>(acc.second), last_counts[rank]});
  }
  std::sort(out.slowest.begin(), out.slowest.end(), [](const auto& a, const auto& b) {
    return std::tie(b.mean_ns, a.rank) < std::tie(a.mean_ns, b.rank);
  });
  return out;
}

std::string format_summary(const run_summary& s) {
  std::string out;
  append(out,
         "{:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>6}   per rank: delivery/handling/return ms\n",
         "step", "total ms", "delivery", "handling", "return", "aggregate", "last");
  for (const auto& st : s.steps) {
    int64_t d = 0, h = 0, r = 0;
    for (const auto& p : st.ranks) {
      d = std::max(d, p.delivery_ns);
      h = std::max(h, p.handling_ns);
      r = std::max(r, p.return_ns);
    }
    append(out, "{:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>6}  ", st.step,
           ms(st.total_ns), ms(d), ms(h), ms(r), ms(st.aggregate_ns), st.last_rank);
    for (const auto& p : st.ranks) {
      append(out, " r{}:{:.3f}/{:.3f}/{:.3f}", p.rank, ms(p.delivery_ns), ms(p.handling_ns),
             ms(p.return_ns));
    }
    out += "\n";
  }
  append(out, "\n{} steps (phases: the slowest rank of each step)\n", s.steps.size());
  append(out, "{:>10} {:>10} {:>10} {:>10}\n", "phase", "p50 ms", "p99 ms", "max ms");
  for (const auto& [name, p] : {std::pair{"total", s.total}, std::pair{"delivery", s.delivery},
                                std::pair{"handling", s.handling}, std::pair{"return", s.ret},
                                std::pair{"aggregate", s.aggregate}}) {
    append(out, "{:>10} {:>10.3f} {:>10.3f} {:>10.3f}\n", name, ms(p.p50_ns), ms(p.p99_ns),
           ms(p.max_ns));
  }
  append(out, "\nslowest ranks (mean delivery+handling+return; steps it was the last to report)\n");
  for (const auto& r : s.slowest) {
    append(out, "  rank {:>3}  {:>8.3f} ms  last in {} steps\n", r.rank, ms(r.mean_ns),
           r.last_count);
  }
  return out;
}

result<std::string> request_path(const trace_set& set, const std::string& request) {
  std::set<int64_t> jobs;
  std::set<int64_t> steps;
  for (const auto& tr : set.records) {
    if (tr.record.request != request) continue;
    if (tr.record.job >= 0) jobs.insert(tr.record.job);
  }
  if (jobs.empty()) {
    return make_error(errc::not_found, "trace: no record names request '" + request +
                                           "' (request ids are recorded at trace level jobs)");
  }
  for (const auto& tr : set.records) {
    if (tr.record.job >= 0 && jobs.count(tr.record.job) && tr.record.step >= 0) {
      steps.insert(tr.record.step);
    }
  }
  const auto offset = estimate_set_offsets(set, link_messages(set));
  std::vector<const traced_record*> path;
  for (const auto& tr : set.records) {
    const auto& r = tr.record;
    const bool of_job = r.job >= 0 && jobs.count(r.job);
    const bool of_step = r.job < 0 && r.step >= 0 && steps.count(r.step) &&
                         (r.type == "metadata" || r.type == "report" || r.type == "output_applied");
    if (of_job || of_step) path.push_back(&tr);
  }
  std::stable_sort(path.begin(), path.end(), [&](const auto* a, const auto* b) {
    return a->record.mono_ns + offset[a->process] < b->record.mono_ns + offset[b->process];
  });
  std::string out = fmt::format("request {}: jobs", request);
  for (auto j : jobs) out += fmt::format(" {}", j);
  out += "\n";
  const int64_t t0 = path.front()->record.mono_ns + offset[path.front()->process];
  for (const auto* tr : path) {
    const auto& r = tr->record;
    const auto& proc = set.processes[tr->process];
    fmt::format_to(std::back_inserter(out), "{:>12.3f} ms  {} {:<8} {:<10} {:<8} {:<16}",
                   ms(r.mono_ns + offset[tr->process] - t0), proc.role, proc.pid, r.track,
                   trace::to_string(r.dir), r.type);
    if (r.step >= 0) fmt::format_to(std::back_inserter(out), " step {}", r.step);
    if (r.rank >= 0 && r.track == "scheduler") {
      fmt::format_to(std::back_inserter(out), " rank {}", r.rank);
    }
    if (r.job >= 0) fmt::format_to(std::back_inserter(out), " job {}", r.job);
    if (r.bytes != 0) fmt::format_to(std::back_inserter(out), " {} bytes", r.bytes);
    if (!r.note.empty()) fmt::format_to(std::back_inserter(out), " ({})", r.note);
    out += "\n";
  }
  return out;
}

}  // namespace kvc::launch
