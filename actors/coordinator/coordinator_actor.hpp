#pragma once
/// The coordinator actor: a thin CAF shell around step_coordinator (completion_aggregator plus
/// deadlines and logging). It unpacks the messages of runtime::coordinator_actor, calls it, and
/// sends every step output the aggregator releases (one per closed step) to the
/// output sink it was given (the scheduler). It reads the actor clock only to turn the job
/// timeout into deadlines and arms its own deadline timer only while the aggregator has
/// deadlines pending. All decisions live in the aggregator.
///
/// Protocol expected from its peers (see runtime/interfaces.hpp): each rank sends rank_up with
/// its incarnation before its first report (a higher incarnation after a restart), then exactly
/// one report message per step in step order (possibly with no events); the scheduler sends
/// expect for a step's jobs; whoever monitors a rank sends rank_down when it dies.
///
/// Owned by the actor system; the state is touched only by the actor itself.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>

#include <caf/fwd.hpp>

#include "actors/coordinator/step_coordinator.hpp"
#include "actors/runtime/interfaces.hpp"
#include "proto/status.hpp"

namespace kvc::coordinator {

struct coordinator_options {
  uint32_t world_size = 1;
  size_t finished_memory = 4096;
  /// A job not completed this long after its expect fails with errc::timeout; 0: never.
  std::chrono::nanoseconds job_timeout{0};
  /// How long never-expected jobs and failed jobs' stragglers are waited for.
  std::chrono::nanoseconds straggler_grace{std::chrono::seconds{30}};
  /// Period of the deadline timer while deadlines are pending (> 0).
  std::chrono::nanoseconds tick_interval{std::chrono::milliseconds{100}};
};

/// The implementation's interface: the public one plus its own timer message.
using coordinator_impl = runtime::coordinator_actor::extend<caf::reacts_to<runtime::tick_atom>>;

struct coordinator_state {
  std::optional<step_coordinator> core;  // engaged by the behavior function
  runtime::output_sink_actor sink;
  std::chrono::nanoseconds tick_interval{0};
  bool tick_armed = false;
  static inline const char* name = "kvc.coordinator";
};

/// The behavior; prefer spawn_coordinator, which validates the options first.
coordinator_impl::behavior_type coordinator(
    coordinator_impl::stateful_pointer<coordinator_state> self, runtime::output_sink_actor sink,
    step_coordinator core, coordinator_options opts);

/// Spawns a coordinator that sends its step outputs to `sink`. Error (invalid_argument),
/// nothing spawned: a world size outside [1, max_world_size], a non-positive tick interval, a
/// negative timeout or grace, or an invalid sink.
result<runtime::coordinator_actor> spawn_coordinator(caf::actor_system& sys,
                                                     runtime::output_sink_actor sink,
                                                     const coordinator_options& opts);

}  // namespace kvc::coordinator
