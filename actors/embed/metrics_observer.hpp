#pragma once
/// metrics_observer: the scheduler process's metrics (docs/observability.md) as an observer of
/// the scheduler facade. The counters live in the pure classes (the planner's, the
/// coordinator's, the manager's); scheduler_metrics adds what the step's flow shows (transfers,
/// round trips), fed here at each step sent and output applied. sample() reads everything at
/// once; with observe.serve_metrics a /metrics server renders the sample the engine thread
/// published last, after each call that applied outputs and at shutdown.
///
/// Always in the facade's list (metrics_text() works without a server). Not thread-safe: the
/// engine's scheduler thread; the server's thread reads published samples only.
#include <cstdint>
#include <memory>

#include "actors/embed/embed_config.hpp"
#include "actors/embed/scheduler_host.hpp"
#include "actors/embed/step_observer.hpp"
#include "actors/metrics/metrics_server.hpp"
#include "actors/metrics/published.hpp"
#include "actors/metrics/scheduler_metrics.hpp"

namespace kvc::embed {

class metrics_observer final : public step_observer {
 public:
  /// With cfg.observe.serve_metrics, publishes a first sample and starts the server on
  /// network.host:metrics_port (errors: metrics_server::start's).
  static result<std::unique_ptr<metrics_observer>> start(const scheduler_connector_config& cfg,
                                                         const scheduler::planner& planner,
                                                         scheduler_host& host);

  void on_step_sent(const connector_metadata& meta, int64_t started) override;
  void on_output_applied(const connector_output& out, int64_t started) override;
  void on_call_end() override { publish(); }
  void on_reset(bool /*ok*/, step_id /*last_step*/) override { publish(); }
  /// Keeps the coordinator's last counters for the scrapes after shutdown.
  void on_stopping() override;
  void on_stopped() override { publish(); }

  /// Everything now (the coordinator's counters as last seen once it stopped).
  metrics::scheduler_sample sample();
  /// The /metrics port, 0 without a server.
  uint16_t port() const noexcept { return server_ ? server_->port() : 0; }

 private:
  metrics_observer(const scheduler::planner& planner, scheduler_host& host, uint32_t world_size)
      : planner_(planner), host_(host), world_size_(world_size) {}
  void publish() {
    if (snapshots_) snapshots_->publish(sample());
  }

  const scheduler::planner& planner_;
  scheduler_host& host_;
  uint32_t world_size_;
  metrics::scheduler_metrics metrics_;
  coordinator::aggregator_stats coordinator_stats_;  // the last seen (kept after shutdown)
  uint32_t ranks_alive_ = 0;
  uint64_t frames_dropped_ = 0;
  std::shared_ptr<metrics::published<metrics::scheduler_sample>> snapshots_;  // null: no server
  std::unique_ptr<metrics::metrics_server> server_;
};

}  // namespace kvc::embed
