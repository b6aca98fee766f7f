#pragma once
/// rank_host: the process set-up behind a worker_connector, everything it runs besides the
/// pure transfer_executor: the rank's copy engine, its mapping of the node's CPU pool, the actor
/// system (its own, or the one of a scheduler_connector of the same process), the rank's actor
/// (its identity on the control plane: registered with and monitored by the scheduler actor,
/// stopped by it) and the rank's end of the step channel. Internal to actors/embed (not
/// installed).
///
/// Two phases, so that everything checkable is checked before the rank registers (a rank whose
/// set-up fails after registering would have used up its incarnation): open() reaches the
/// scheduler (connect with a fixed port: a TCP probe within register_timeout, then CAF's
/// connect), makes the engine and opens the pool (node_pool.hpp); register_rank() registers and
/// connects the step channel. With network.port 0 the scheduler may not exist yet (vLLM builds
/// its workers first): connect_published() waits for it to publish its port in the pool's
/// segment and reaches it there, before register_rank().
///
/// Not thread-safe: one thread at a time calls everything (the rank's worker thread, or the
/// worker_connector's joining thread while the worker thread waits for it); gone() may be read
/// anywhere.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "actors/channel/rank_channel.hpp"
#include "actors/control/gate.hpp"
#include "actors/control/interfaces.hpp"
#include "actors/embed/actor_host.hpp"
#include "actors/embed/embed_config.hpp"
#include "actors/embed/local_endpoint.hpp"
#include "actors/trace/tracer.hpp"
#include "actors/worker/transfer_executor.hpp"
#include "cuda/copy_engine.hpp"
#include "cuda/faulty_copy_engine.hpp"
#include "proto/status.hpp"
#include "shm/segment.hpp"

namespace kvc::embed {

class rank_host {
 public:
  /// Errors: errc::invalid_argument for an in_process rank without `local`, errc::io_error when
  /// the scheduler is shut down or cannot be reached (errc::timeout when nothing answers at
  /// host:port within register_timeout), the engine's, the segment's (errc::not_found before
  /// the scheduler created it, errc::layout_mismatch for another geometry).
  static result<std::unique_ptr<rank_host>> open(const worker_connector_config& cfg,
                                                 const local_endpoint* local);
  ~rank_host();

  cuda::copy_engine& engine() noexcept { return *engine_; }
  /// Copy faults fired on this rank's engine (fail_copy, delay_copy), by kind.
  fault_counts injected_faults() const noexcept;
  const shm::segment& pool() const noexcept { return *segment_; }
  /// This rank's region of the pool.
  worker::cpu_pool_region region() const noexcept;

  /// With network.port 0: waits until a scheduler side published its port in the pool's
  /// segment (errc::timeout after `deadline`, errc::io_error once `cancelled`), then reaches it
  /// (open()'s errors). With a fixed port and pool.create_or_attach (open() did not reach it):
  /// waits the same way until something answers at network.host:port. Success at once when the
  /// scheduler is reached already.
  status connect_published(std::chrono::steady_clock::time_point deadline,
                           const std::atomic<bool>& cancelled);
  /// Registers with the scheduler (waiting up to register_timeout for its answer: a refusal is
  /// the scheduler's error, no answer errc::timeout) and connects the step channel.
  status register_rank();
  /// The rank's end of the step channel; valid after register_rank.
  channel::rank_channel& channel() noexcept { return *channel_; }
  /// This rank's tracer; null when observe.trace is off.
  const std::shared_ptr<trace::tracer>& tracer() const noexcept { return tracer_; }
  /// The scheduler stopped this rank or is gone: no more steps will come.
  bool gone() const noexcept { return ending_->load() != 0; }
  /// The scheduler stopped this rank (as opposed to being lost).
  bool stopped() const noexcept { return ending_->load() == stop_reason; }

  /// What `ending` holds: 0 while live, then why the rank's actor ended.
  static constexpr uint8_t stop_reason = 1;   ///< the scheduler's stop, or an exit
  static constexpr uint8_t lost_reason = 2;   ///< the scheduler's death (the monitor fired)
  static constexpr uint8_t local_reason = 3;  ///< this process ended the rank

 private:
  rank_host() = default;
  /// Reaches the scheduler's gate at network.host:port and its actor through it.
  status connect(uint16_t port);

  worker_connector_config cfg_;
  std::string segment_name_;
  channel::server_transport* local_transport_ = nullptr;  // in_process
  control::scheduler_actor scheduler_;
  std::shared_ptr<trace::tracer> tracer_;  // outlives everything that records through it
  // Declaration order = reverse destruction order: the engine before the pool mapping it
  // registered; the rank's actor before the actor system.
  std::optional<shm::segment> segment_;
  std::unique_ptr<cuda::copy_engine> engine_;
  cuda::faulty_copy_engine* faulty_ = nullptr;  // engine_ when copy faults wrap it
  std::unique_ptr<control::gate_tunnel> tunnel_;  // connect: CAF's way through the gate
  std::shared_ptr<actor_host> host_;
  caf::actor rank_actor_;
  std::shared_ptr<std::atomic<uint8_t>> ending_ = std::make_shared<std::atomic<uint8_t>>(0);
  std::unique_ptr<channel::rank_channel> channel_;
};

}  // namespace kvc::embed
