#include "actors/embed/metrics_observer.hpp"

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace kvc::embed {

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

result<std::unique_ptr<metrics_observer>> metrics_observer::start(
    const scheduler_connector_config& cfg, const scheduler::planner& planner,
    scheduler_host& host) {
  std::unique_ptr<metrics_observer> m{
      new metrics_observer(planner, host, cfg.topology.world_size())};
  if (!cfg.observe.serve_metrics) return m;
  m->snapshots_ = std::make_shared<metrics::published<metrics::scheduler_sample>>();
  m->publish();
  auto scrapes = std::make_shared<std::atomic<uint64_t>>(0);
  auto srv = metrics::metrics_server::start(
      cfg.network.host, cfg.observe.metrics_port, [snap = m->snapshots_, scrapes] {
        std::string text = metrics::render(*snap->get());
        spdlog::debug("metrics: scrape {} served", scrapes->fetch_add(1) + 1);
        return text;
      });
  if (!srv) return srv.error();
  m->server_ = std::move(srv).value();
  return m;
}

void metrics_observer::on_step_sent(const connector_metadata& meta, int64_t /*started*/) {
  metrics_.on_step_sent(meta, now_ns());
}

void metrics_observer::on_output_applied(const connector_output& out, int64_t /*started*/) {
  metrics_.on_output_applied(out, now_ns(), planner_.settled_results_dropped());
}

void metrics_observer::on_stopping() {
  if (host_.live()) (void)sample();
}

metrics::scheduler_sample metrics_observer::sample() {
  if (host_.live()) {
    coordinator::blocking_coordinator& coord = host_.coordinator();
    coordinator_stats_ = coord.core().aggregator().stats();
    ranks_alive_ = coord.routed_ranks();
    frames_dropped_ = coord.channel().dropped_frames();
  }
  std::vector<std::pair<std::string, uint64_t>> fired;
  const fault_counts counts = host_.faults().injected;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] != 0) fired.emplace_back(to_string(static_cast<fault_kind>(k)), counts[k]);
  }
  const scheduler::offload_manager& mgr = planner_.manager();
  const std::optional<scheduler::file_tier_counters> tier =
      planner_.has_file_tier() ? std::optional{planner_.tier_counters()} : std::nullopt;
  return metrics_.sample({.planner = &planner_.stats(),
                          .coordinator = &coordinator_stats_,
                          .stores_skipped = mgr.stores_skipped(),
                          .pool_capacity = mgr.capacity(),
                          .pool_used = mgr.size(),
                          .jobs_in_flight = planner_.jobs_in_flight(),
                          .world_size = world_size_,
                          .ranks_alive = ranks_alive_,
                          .frames_dropped = frames_dropped_,
                          .faults_fired = std::move(fired),
                          .file_tier = tier ? &*tier : nullptr});
}

}  // namespace kvc::embed
