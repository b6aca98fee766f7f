#pragma once
/// faulty_server_transport: a server_transport decorator (leveldb EnvWrapper style) that injects
/// the channel faults of a fault_config into the step reports the scheduler's end receives, at
/// the one seam every transport shares. Everything else (hellos, metadata going out,
/// connect_local, remote_endpoint) passes unchanged; with no channel fault it behaves exactly
/// like its target.
///
/// Each inbound report frame is one occurrence for the pure fault_decider, keyed by the
/// report's rank and step (decoded from the frame; a frame that does not decode passes on, for
/// the channel to refuse). What the decision does to the frame:
///   drop_report       it is discarded;
///   duplicate_report  it is delivered twice, back to back;
///   delay_report      by steps: it is held until a report of step >= its step + `delay_steps`
///                     passed (then delivered right after that one); by ms: it is held until
///                     `delay_ms` after it arrived by the clock passed in, then delivered by
///                     the first receive() at or after that time (a receive waits no longer
///                     than until the earliest held frame is due);
///   reorder_reports   it is held until the next report passed (the two swap places);
///   corrupt_frame     `bits` bits of the encoded frame are flipped at positions drawn from the
///                     decider, then it is delivered (the codec's checksum refuses it).
/// A held frame whose release never comes stays held (held_frames() counts them): to the
/// coordinator that is a dropped report, failed by the job's deadline.
///
/// The decision stays the pure decider's (seed, site, counter); only the release of a frame held
/// by time reads the clock.
///
/// Every firing is counted by kind (fired()) and passed to the hook, if any, for the caller to
/// log (this class logs nothing). Ownership: owns its target. Thread-safety: receive() on one
/// thread (the scheduler channel's); connect_local, like the target's, from any.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/channel/transport.hpp"
#include "proto/fault_decider.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::channel {

/// One fault the channel seam injected.
struct channel_fault {
  fault_kind kind = fault_kind::drop_report;
  size_t spec = 0;  ///< index among the config's channel specs
  rank_id rank = 0;
  step_id step = 0;
  std::string peer;
};

class faulty_server_transport final : public server_transport {
 public:
  using fault_hook = std::function<void(const channel_fault&)>;
  /// Monotonic time; what a frame held by delay_report's ms form is released by.
  using clock_fn = std::function<std::chrono::nanoseconds()>;

  /// errc::invalid_argument for a null target or an invalid config. Only the config's channel
  /// specs are used. `clock`: none = steady_clock.
  static result<std::unique_ptr<faulty_server_transport>> make(
      std::unique_ptr<server_transport> target, const fault_config& config, fault_hook hook = {},
      clock_fn clock = {});

  const std::string& remote_endpoint() const noexcept override {
    return target_->remote_endpoint();
  }
  result<std::unique_ptr<client_transport>> connect_local(const std::string& peer) override {
    return target_->connect_local(peer);
  }
  status send(std::string_view peer, std::span<const char> bytes) override {
    return target_->send(peer, bytes);
  }
  /// The target's next frame after the faults were applied. Waits up to `timeout` for the
  /// target's first frame; when faults swallowed what came, takes more without waiting.
  result<std::optional<inbound_frame>> receive(std::chrono::milliseconds timeout) override;

  /// How often each kind fired.
  const fault_counts& fired() const noexcept { return decider_.fired(); }
  /// Reports held by delay_report or reorder_reports, not yet delivered.
  size_t held_frames() const noexcept {
    return delayed_.size() + timed_.size() + reordered_.size();
  }

 private:
  struct delayed_frame {
    step_id release_step = 0;  ///< by steps
    inbound_frame frame;
  };
  struct timed_frame {
    std::chrono::nanoseconds due{0};  ///< by ms: the clock's time it is released at
    inbound_frame frame;
  };

  faulty_server_transport(std::unique_ptr<server_transport> target, fault_decider decider,
                          fault_hook hook, clock_fn clock)
      : target_(std::move(target)),
        decider_(std::move(decider)),
        hook_(std::move(hook)),
        clock_(std::move(clock)) {}

  /// Applies the faults to one inbound frame; what is to be delivered goes to ready_.
  void apply(inbound_frame frame);
  /// Frames held by time that are due at `now` to ready_, in the order they were held.
  void release_timed(std::chrono::nanoseconds now);
  void corrupt(inbound_frame& frame, const fault_decider::firing& f);

  std::unique_ptr<server_transport> target_;
  fault_decider decider_;
  fault_hook hook_;
  clock_fn clock_;
  std::deque<inbound_frame> ready_;
  std::vector<delayed_frame> delayed_;
  std::vector<timed_frame> timed_;
  std::vector<inbound_frame> reordered_;
};

}  // namespace kvc::channel
