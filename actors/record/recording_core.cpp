#include "actors/record/recording_core.hpp"

#include <utility>

namespace kvc::record {

void recording_core::report(const step_report& r) {
  rec_->report(r);
  target_->report(r);
}

void recording_core::expect(const connector_metadata& meta, uint64_t now) {
  rec_->expect(meta.step, now);
  target_->expect(meta, now);
}

void recording_core::rank_up(rank_id rank, uint32_t incarnation) {
  rec_->rank_up(rank, incarnation);
  target_->rank_up(rank, incarnation);
}

void recording_core::rank_down(rank_id rank) {
  rec_->rank_down(rank);
  target_->rank_down(rank);
}

void recording_core::tick(uint64_t now) {
  rec_->tick(now);
  target_->tick(now);
}

std::optional<connector_output> recording_core::poll_output() {
  auto out = target_->poll_output();
  rec_->poll(out);
  return out;
}

}  // namespace kvc::record
