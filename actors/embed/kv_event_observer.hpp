#pragma once
/// kv_event_observer: the KV-event publisher (observe.kv_events_endpoint; vLLM's wire format,
/// docs/observability.md) as an observer of the scheduler facade. It takes the planner's
/// stored / removed block events and publishes them as one batch: when a step's metadata went
/// out (the evictions that made room for its stores) and at the end of every call that applied
/// outputs; at shutdown the rest, then AllBlocksCleared (the pool goes with the process). The
/// engine's take_events() hands out nothing while it runs (takes_kv_events).
///
/// Owns the publisher. Not thread-safe: the engine's scheduler thread (the publisher has a
/// thread of its own).
#include <memory>
#include <string>

#include "actors/embed/embed_config.hpp"
#include "actors/embed/step_observer.hpp"
#include "actors/kv_events/batch_encoder.hpp"
#include "actors/kv_events/publisher.hpp"

namespace kvc::embed {

class kv_event_observer final : public step_observer {
 public:
  /// Starts the publisher on o.kv_events_endpoint (and its replay endpoint, when set). Errors:
  /// kv_events::publisher::start's.
  static result<std::unique_ptr<kv_event_observer>> start(const observe_config& o,
                                                          scheduler::planner& planner);

  void on_step_sent(const connector_metadata& /*meta*/, int64_t /*started*/) override { publish(); }
  void on_call_end() override { publish(); }
  void on_reset_requested() override { publish(); }
  /// A reset that emptied the pool is one AllBlocksCleared batch.
  void on_reset(bool ok, step_id /*last_step*/) override;
  bool takes_kv_events() const noexcept override { return true; }
  void on_stopped() override;

  /// The PUB and ROUTER sockets' bound addresses (real ports); the second empty when off.
  std::string endpoint() const { return publisher_->endpoint(); }
  std::string replay_endpoint() const { return publisher_->replay_endpoint(); }

 private:
  kv_event_observer(scheduler::planner& planner, std::unique_ptr<kv_events::publisher> pub,
                    kv_events::batch_options batch)
      : planner_(planner), publisher_(std::move(pub)), batch_(batch) {}
  /// The planner's events since the last call as one batch; nothing when there are none.
  void publish();

  scheduler::planner& planner_;
  std::unique_ptr<kv_events::publisher> publisher_;
  kv_events::batch_options batch_;
  bool cleared_ = false;  // AllBlocksCleared sent
};

}  // namespace kvc::embed
