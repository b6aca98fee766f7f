#include "actors/coordinator/blocking_coordinator.hpp"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/system_messages.hpp>

namespace kvc::coordinator {

namespace {

using steady = std::chrono::steady_clock;

/// While waiting on the channel, the mailbox (rank_down, a watched actor's end) is looked at
/// this often.
constexpr std::chrono::milliseconds mailbox_slice{10};

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
          .count());
}

}  // namespace

result<std::unique_ptr<blocking_coordinator>> blocking_coordinator::create(
    caf::actor_system& sys, const coordinator_options& opts,
    std::unique_ptr<channel::scheduler_channel> channel) {
  if (!channel) return make_error(errc::invalid_argument, "coordinator: no step channel");
  auto core = step_coordinator::create(opts);
  if (!core) return core.error();
  return std::unique_ptr<blocking_coordinator>{new blocking_coordinator(
      sys, opts, std::make_unique<step_coordinator>(std::move(core).value()), std::move(channel))};
}

blocking_coordinator::blocking_coordinator(caf::actor_system& sys,
                                           const coordinator_options& opts,
                                           std::unique_ptr<step_core> core,
                                           std::unique_ptr<channel::scheduler_channel> channel)
    : self_(sys), opts_(opts), core_(std::move(core)), channel_(std::move(channel)) {}

control::coordinator_actor blocking_coordinator::handle() {
  return caf::actor_cast<control::coordinator_actor>(caf::actor{self_});
}

void blocking_coordinator::watch(const caf::actor& peer) {
  watched_ = peer.address();
  self_->monitor(peer);
}

void blocking_coordinator::send_step(const connector_metadata& meta) {
  take_arrived();  // rank_up / rank_down and hellos first: the step goes to the live ranks
  core_->expect(meta, now_ns());
  channel_->send_step(meta);
  log_notes();
}

std::optional<connector_output> blocking_coordinator::poll_output() {
  return core_->poll_output();
}

bool blocking_coordinator::receive_control(std::chrono::nanoseconds timeout) {
  bool got = true;
  self_->receive(
      [&](control::rank_up_atom, rank_id rank, uint32_t incarnation) {
        core_->rank_up(rank, incarnation);
        channel_->rank_up(rank, incarnation);
      },
      [&](control::rank_down_atom, rank_id rank) {
        core_->rank_down(rank);
        channel_->rank_down(rank);
      },
      [&](caf::down_msg& dm) {
        if (dm.source != watched_) return;
        spdlog::error("coordinator: the scheduler actor ended: {}",
                      self_->system().render(dm.reason));
        gone_ = true;
      },
      caf::after(timeout) >> [&] { got = false; });
  return got;
}

void blocking_coordinator::receive_frames(std::chrono::milliseconds timeout) {
  reports_.clear();
  channel_->receive(timeout, reports_);
  for (const step_report& r : reports_) core_->report(r);
  if (core_->needs_tick()) core_->tick(now_ns());
  log_notes();
}

void blocking_coordinator::forget_jobs(std::span<const job_id> jobs) {
  if (jobs.empty()) return;
  core_->forget_jobs(jobs);
  log_notes();
}

void blocking_coordinator::take_arrived() {
  // The emptiness check comes first: a CAF receive with a timeout, even zero, arms a timer on
  // the actor clock's thread (a wake-up).
  while (!self_->mailbox().empty() && receive_control(std::chrono::nanoseconds::zero())) {
  }
  receive_frames(std::chrono::milliseconds::zero());
}

void blocking_coordinator::wait_some(std::chrono::nanoseconds left) {
  auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(left);
  if (wait < left) wait += std::chrono::milliseconds{1};  // round up: never spin
  receive_frames(std::min(wait, mailbox_slice));
  take_arrived();
}

void blocking_coordinator::log_notes() {
  for (const auto& n : core_->take_notes()) {
    switch (n.lvl) {
      case coordinator_note::level::debug:
        spdlog::debug("{}", n.text);
        break;
      case coordinator_note::level::info:
        spdlog::info("{}", n.text);
        break;
      case coordinator_note::level::warn:
        spdlog::warn("{}", n.text);
        break;
    }
  }
  for (const auto& text : channel_->take_notes()) spdlog::warn("{}", text);
}

}  // namespace kvc::coordinator
