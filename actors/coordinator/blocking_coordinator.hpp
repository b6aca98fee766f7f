#pragma once
/// blocking_coordinator: the coordinator actor. It runs on the engine's scheduler thread as a
/// CAF blocking actor (a scoped actor of that thread), so a step's reports are aggregated where
/// the step's output is consumed and no actor is scheduled per step. Its state, and every
/// decision, is the pure step_coordinator; it only moves messages in and notes out:
///   * control plane (CAF mailbox): rank_up / rank_down from the scheduler actor, which names
///     this actor as the coordinator in its registration replies; the end of a watched actor
///     (the scheduler actor) makes it gone();
///   * step channel: send_step expects the step's jobs and sends the metadata to every live
///     rank; the ranks' step_reports come back through the channel.
/// Nothing happens between calls: the engine thread drives it (take_arrived, wait_some). Control
/// messages are handled before the channel's frames, so a rank's rank_up routes its hello.
/// It drives the core through step_core (step_core.hpp): a decorator put around it with
/// wrap_core (record::recording_core records every input where the core consumes it) sees each
/// report, rank event, tick, expect and poll; the actor does not know which it holds.
///
/// Not thread-safe: the thread that created it calls everything (a scoped actor belongs to
/// its thread). Destroy it before the actor system.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/channel/scheduler_channel.hpp"
#include "actors/control/interfaces.hpp"
#include "actors/coordinator/step_core.hpp"
#include "actors/coordinator/step_coordinator.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"

namespace kvc::coordinator {

class blocking_coordinator {
 public:
  /// Wraps a core in a decorator (takes the core, returns the decorator that owns it).
  using core_decorator = std::function<std::unique_ptr<step_core>(std::unique_ptr<step_core>)>;

  /// Errors: validate(opts)'s (nothing started); the channel must serve opts.world_size ranks.
  static result<std::unique_ptr<blocking_coordinator>> create(
      caf::actor_system& sys, const coordinator_options& opts,
      std::unique_ptr<channel::scheduler_channel> channel);

  blocking_coordinator(const blocking_coordinator&) = delete;
  blocking_coordinator& operator=(const blocking_coordinator&) = delete;

  /// This actor's handle, for the scheduler actor's rank_up / rank_down.
  control::coordinator_actor handle();
  /// gone() turns true when `peer` ends (the scheduler actor).
  void watch(const caf::actor& peer);

  /// Expects the step's jobs (deadlines from now) and sends its metadata to every live rank.
  /// What has arrived is handled first, so the step goes to the ranks live now.
  void send_step(const connector_metadata& meta);
  /// Handles what has arrived (control messages, then the channel's frames), without waiting.
  void take_arrived();
  /// Waits up to `left` for something to arrive (in slices: the mailbox is looked at every
  /// 10 ms while waiting on the channel), then handles what has.
  void wait_some(std::chrono::nanoseconds left);
  /// The next released step output.
  std::optional<connector_output> poll_output();
  /// The engine decided these jobs itself: the core stops waiting for them
  /// (step_core::forget_jobs).
  void forget_jobs(std::span<const job_id> jobs);
  /// Puts `wrap`'s decorator around the core held now; before the first step (a decorator that
  /// records sees every input from its first on).
  void wrap_core(const core_decorator& wrap) { core_ = wrap(std::move(core_)); }
  /// The options the core was built with (what a record's header holds).
  const coordinator_options& options() const noexcept { return opts_; }

  /// A watched actor ended.
  bool gone() const noexcept { return gone_; }
  uint32_t routed_ranks() const noexcept { return channel_->routed_ranks(); }
  const channel::scheduler_channel& channel() const noexcept { return *channel_; }
  /// Where ranks of other processes connect (empty: this process only).
  const std::string& transport_endpoint() const noexcept {
    return channel_->transport().remote_endpoint();
  }
  /// The channel's transport, for ranks of this process (server_transport::connect_local).
  channel::server_transport& channel_transport() noexcept { return channel_->transport(); }
  /// The core's state (under any decorator).
  const step_coordinator& core() const noexcept { return core_->state(); }

 private:
  blocking_coordinator(caf::actor_system& sys, const coordinator_options& opts,
                       std::unique_ptr<step_core> core,
                       std::unique_ptr<channel::scheduler_channel> channel);
  /// One control message within `timeout`; false when none came.
  bool receive_control(std::chrono::nanoseconds timeout);
  /// The channel's frames within `timeout`, then deadlines and notes.
  void receive_frames(std::chrono::milliseconds timeout);
  void log_notes();

  caf::scoped_actor self_;
  coordinator_options opts_;
  std::unique_ptr<step_core> core_;  // never null
  std::unique_ptr<channel::scheduler_channel> channel_;
  caf::actor_addr watched_;
  bool gone_ = false;
  std::vector<step_report> reports_;  // scratch
};

}  // namespace kvc::coordinator
