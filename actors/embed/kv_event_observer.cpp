#include "actors/embed/kv_event_observer.hpp"

#include <chrono>
#include <utility>

namespace kvc::embed {

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

result<std::unique_ptr<kv_event_observer>> kv_event_observer::start(const observe_config& o,
                                                                    scheduler::planner& planner) {
  kv_events::batch_options batch;
  batch.block_size = planner.geometry().offloaded_block_size;
  kv_events::publisher_options po;
  po.endpoint = o.kv_events_endpoint;
  po.replay_endpoint = o.kv_events_replay_endpoint;
  po.topic = o.kv_events_topic;
  po.buffer = o.kv_events_buffer;
  auto pub = kv_events::publisher::start(po);
  if (!pub) return pub.error();
  return std::unique_ptr<kv_event_observer>{
      new kv_event_observer(planner, std::move(pub).value(), batch)};
}

void kv_event_observer::on_reset(bool ok, step_id /*last_step*/) {
  if (ok) publisher_->publish(kv_events::encode_cleared(wall_seconds(), batch_));
}

void kv_event_observer::publish() {
  auto evs = planner_.take_all_events();  // the pool's, then the file tier's (medium STORAGE)
  if (evs.empty()) return;
  publisher_->publish(kv_events::encode_batch(wall_seconds(), evs, batch_));
}

void kv_event_observer::on_stopped() {
  publish();
  if (!cleared_) publisher_->publish(kv_events::encode_cleared(wall_seconds(), batch_));
  cleared_ = true;
}

}  // namespace kvc::embed
