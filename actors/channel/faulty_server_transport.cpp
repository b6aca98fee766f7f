#include "actors/channel/faulty_server_transport.hpp"

#include <algorithm>
#include <utility>

namespace kvc::channel {

result<std::unique_ptr<faulty_server_transport>> faulty_server_transport::make(
    std::unique_ptr<server_transport> target, const fault_config& config, fault_hook hook,
    clock_fn clock) {
  if (!target) return make_error(errc::invalid_argument, "faulty step channel: null target");
  auto decider = fault_decider::make(config, fault_site::channel);
  if (!decider) return decider.error();
  if (!clock) {
    clock = [] { return std::chrono::steady_clock::now().time_since_epoch(); };
  }
  return std::unique_ptr<faulty_server_transport>{new faulty_server_transport(
      std::move(target), std::move(decider).value(), std::move(hook), std::move(clock))};
}

result<std::optional<inbound_frame>> faulty_server_transport::receive(
    std::chrono::milliseconds timeout) {
  auto wait = timeout;
  while (ready_.empty()) {
    release_timed(clock_());
    if (!ready_.empty()) break;
    // Wait no longer than until the earliest frame held by time is due.
    auto this_wait = wait;
    if (!timed_.empty()) {
      auto earliest = timed_.front().due;
      for (const timed_frame& t : timed_) earliest = std::min(earliest, t.due);
      const auto until = std::chrono::ceil<std::chrono::milliseconds>(
          std::max(earliest - clock_(), std::chrono::nanoseconds::zero()));
      this_wait = std::min(this_wait, until);
    }
    auto frame = target_->receive(this_wait);
    if (!frame) return frame.error();
    if (*frame) {
      apply(std::move(**frame));
      wait = std::chrono::milliseconds::zero();  // take more only without waiting
      continue;
    }
    release_timed(clock_());
    if (!ready_.empty() || this_wait >= wait) break;
    wait -= this_wait;
  }
  if (ready_.empty()) return std::optional<inbound_frame>{};
  inbound_frame out = std::move(ready_.front());
  ready_.pop_front();
  return std::optional<inbound_frame>{std::move(out)};
}

void faulty_server_transport::apply(inbound_frame frame) {
  auto kind = kind_of(frame.bytes);
  if (!kind || *kind != wire_kind::report) {
    ready_.push_back(std::move(frame));
    return;
  }
  auto report = decode_report(frame.bytes);
  if (!report) {  // not ours to judge: the channel refuses it
    ready_.push_back(std::move(frame));
    return;
  }
  const rank_id rank = report->rank;
  const step_id step = report->step;
  // Held before this report: a reordered one goes right after it, a delayed one once due.
  std::vector<inbound_frame> swapped = std::exchange(reordered_, {});
  const auto decision = decider_.next(rank, step);
  if (decision && hook_) hook_({decision->kind, decision->spec, rank, step, frame.peer});
  if (!decision) {
    ready_.push_back(std::move(frame));
  } else {
    switch (decision->kind) {
      case fault_kind::drop_report:
        break;
      case fault_kind::duplicate_report:
        ready_.push_back(frame);
        ready_.push_back(std::move(frame));
        break;
      case fault_kind::delay_report: {
        const fault_spec& spec = decider_.config().specs[decision->spec];
        if (spec.delay_ms) {
          timed_.push_back(
              {clock_() + std::chrono::milliseconds{*spec.delay_ms}, std::move(frame)});
        } else {
          delayed_.push_back({step + spec.delay_steps, std::move(frame)});
        }
        break;
      }
      case fault_kind::reorder_reports:
        reordered_.push_back(std::move(frame));
        break;
      case fault_kind::corrupt_frame:
        corrupt(frame, *decision);
        ready_.push_back(std::move(frame));
        break;
      default:  // only channel kinds reach this decider
        ready_.push_back(std::move(frame));
        break;
    }
  }
  for (inbound_frame& f : swapped) ready_.push_back(std::move(f));
  // Delayed frames due at this step, in the order they were held.
  auto due = std::stable_partition(delayed_.begin(), delayed_.end(),
                                   [&](const delayed_frame& d) { return d.release_step > step; });
  for (auto it = due; it != delayed_.end(); ++it) ready_.push_back(std::move(it->frame));
  delayed_.erase(due, delayed_.end());
}

void faulty_server_transport::release_timed(std::chrono::nanoseconds now) {
  auto due = std::stable_partition(timed_.begin(), timed_.end(),
                                   [&](const timed_frame& t) { return t.due > now; });
  for (auto it = due; it != timed_.end(); ++it) ready_.push_back(std::move(it->frame));
  timed_.erase(due, timed_.end());
}

void faulty_server_transport::corrupt(inbound_frame& frame, const fault_decider::firing& f) {
  const fault_spec& spec = decider_.config().specs[f.spec];
  const uint64_t bits = frame.bytes.size() * 8;
  std::vector<uint64_t> flipped;  // distinct bits: two flips of one bit would undo each other
  for (uint32_t k = 0; k < spec.bits && flipped.size() < bits; ++k) {
    uint64_t bit = static_cast<uint64_t>(decider_.draw(f, k) * static_cast<double>(bits));
    while (std::find(flipped.begin(), flipped.end(), bit) != flipped.end()) bit = (bit + 1) % bits;
    flipped.push_back(bit);
    frame.bytes[bit / 8] = static_cast<char>(frame.bytes[bit / 8] ^ (1 << (bit % 8)));
  }
}

}  // namespace kvc::channel
