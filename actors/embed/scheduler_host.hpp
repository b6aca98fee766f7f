#pragma once
/// scheduler_host: the process set-up behind a scheduler_connector, everything it runs besides
/// the planner: the node's CPU pool (the shm segment, created here and removed at the end, or
/// attached when pool.create_or_attach found it created by a worker: node_pool.hpp), the
/// actor system, the scheduler actor (registration, supervision, stop; published on
/// network.host:port with `listen`, behind the gate: control/gate.hpp) and the coordinator
/// actor, blocking on the engine's
/// scheduler thread, with the scheduler's end of the step channel. Internal to actors/embed
/// (not installed).
///
/// Not thread-safe: the engine's scheduler thread (the one that started it) calls everything;
/// endpoint() may be handed to other threads.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "actors/control/gate.hpp"
#include "actors/coordinator/blocking_coordinator.hpp"
#include "actors/embed/actor_host.hpp"
#include "actors/embed/embed_config.hpp"
#include "actors/embed/local_endpoint.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "actors/trace/tracer.hpp"
#include "proto/status.hpp"
#include "shm/segment.hpp"

namespace kvc::embed {

class scheduler_host {
 public:
  /// Creates the segment, starts the actors and, with cfg.listen, publishes the scheduler.
  /// Errors: errc::shm_error / capacity_exhausted for the segment, errc::io_error when a port
  /// cannot be opened; nothing is left behind.
  static result<std::unique_ptr<scheduler_host>> start(const scheduler_connector_config& cfg);
  /// stop() with a 5 s limit unless stopped.
  ~scheduler_host();

  uint16_t port() const noexcept { return port_; }
  /// False when the node's segment existed already (pool.create_or_attach): workers were built
  /// before this side.
  bool created_segment() const noexcept { return segment_ && segment_->is_creator(); }
  /// The coordinator's and the fault seam's counts (kept after stop()).
  fault_stats faults() const;
  const std::string& segment_name() const noexcept { return segment_name_; }
  /// The coordinator; valid until stop().
  coordinator::blocking_coordinator& coordinator() noexcept { return *coordinator_; }
  /// The coordinator's counters (job outcomes, rank losses and restarts); zeros after stop().
  coordinator::aggregator_stats coordinator_stats() const noexcept {
    return coordinator_ ? coordinator_->core().aggregator().stats()
                        : coordinator::aggregator_stats{};
  }
  /// For in-process workers; an invalid scheduler handle after stop().
  local_endpoint endpoint() const;
  /// Rank `rank`'s bytes of slot `s`; empty when out of range or stopped.
  std::span<const std::byte> pool_slot(rank_id rank, cpu_slot s) const noexcept {
    if (!segment_) return {};
    const std::byte* p = segment_->slot(rank, s);
    if (p == nullptr) return {};
    return {p, segment_->geometry().slot_bytes};
  }
  /// This process's tracer; null when observe.trace is off, and after stop() (the trace file
  /// is complete then).
  const std::shared_ptr<trace::tracer>& tracer() const noexcept { return tracer_; }
  /// The actors run (not stopped, the scheduler actor did not end).
  bool live() const noexcept { return scheduler_ && !coordinator_->gone(); }

  /// Blocks until every rank registered and said hello on the step channel. errc::timeout when
  /// `timeout` passed first; errc::io_error when the scheduler actor is gone.
  status wait_ready(std::chrono::milliseconds timeout);
  /// Stops every registered worker, ends the actors, removes the segment, drops the tracer (the
  /// trace file is complete). The number of workers stopped, or errc::timeout when they did not
  /// all go within `timeout` (the rest is done anyway). Later calls return 0.
  result<uint32_t> stop(std::chrono::milliseconds timeout);

 private:
  scheduler_host() = default;

  uint32_t world_size_ = 0;
  std::string segment_name_;
  std::shared_ptr<trace::tracer> tracer_;  // outlives everything that records through it
  // Declaration order = reverse destruction order: the actors end before the segment goes.
  std::optional<shm::segment> segment_;
  std::shared_ptr<actor_host> host_;
  std::unique_ptr<coordinator::blocking_coordinator> coordinator_;
  scheduler::scheduler_impl scheduler_;        // invalid after stop
  std::unique_ptr<control::gatekeeper> gate_;  // with listen: in front of CAF's port
  uint16_t port_ = 0;
  fault_counts injected_{};  // counted by the fault seam's hook
  fault_stats stopped_faults_;  // faults() as stop() found it
};

}  // namespace kvc::embed
