#include "actors/scheduler/worker_registry.hpp"

#include <cstdint>
#include <string>
#include <utility>

namespace kvc::scheduler {

result<worker_registry> worker_registry::create(scheduler::handshake_expectation want) {
  if (auto st = scheduler::validate_expectation(want); !st) return st;
  return worker_registry{std::move(want)};
}

worker_registry::worker_registry(scheduler::handshake_expectation want)
    : want_(std::move(want)), ranks_(want_.world_size()) {}

status worker_registry::admit(const worker_registration& reg) {
  if (auto st = scheduler::validate_registration(want_, reg); !st) return st;
  rank_state& rs = ranks_[reg.rank];
  const std::string who = "registration of rank " + std::to_string(reg.rank) + " (pid " +
                          std::to_string(reg.pid) + ", incarnation " +
                          std::to_string(reg.incarnation) + ") refused: ";
  if (stopping_) return make_error(errc::not_ready, who + "the scheduler is stopping");
  if (!rs.incarnation && reg.incarnation == UINT32_MAX) {
    return make_error(errc::invalid_argument,
                      who + "a first registration with incarnation 4294967295 is reserved: no "
                            "restart could follow it");
  }
  if (rs.live) {
    return make_error(errc::protocol_mismatch,
                      who + "the rank is already registered and alive (incarnation " +
                          std::to_string(*rs.incarnation) + ")");
  }
  if (rs.incarnation && reg.incarnation <= *rs.incarnation) {
    return make_error(errc::protocol_mismatch,
                      who + "a restarted rank needs an incarnation above its last one, " +
                          std::to_string(*rs.incarnation));
  }
  rs.live = true;
  rs.incarnation = reg.incarnation;
  ++live_;
  return status::success();
}

status worker_registry::remove(rank_id rank) {
  if (rank >= ranks_.size() || !ranks_[rank].live) {
    return make_error(errc::not_found, "rank " + std::to_string(rank) + " is not live");
  }
  ranks_[rank].live = false;
  --live_;
  return status::success();
}

std::vector<rank_id> worker_registry::begin_stop() {
  std::vector<rank_id> told;
  if (stopping_) return told;
  stopping_ = true;
  for (rank_id r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r].live) told.push_back(r);
  }
  stopped_ = static_cast<uint32_t>(told.size());
  return told;
}

bool worker_registry::is_live(rank_id rank) const noexcept {
  return rank < ranks_.size() && ranks_[rank].live;
}

std::optional<uint32_t> worker_registry::incarnation(rank_id rank) const noexcept {
  if (rank >= ranks_.size()) return std::nullopt;
  return ranks_[rank].incarnation;
}

}  // namespace kvc::scheduler
