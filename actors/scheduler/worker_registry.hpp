#pragma once
/// worker_registry: which ranks of the scheduler's node have a live worker, whether a new
/// worker may register, and where a stop stands. The pure core of the scheduler actor's
/// decisions; the actor keeps the worker handles, calls it, and sends or logs what it answers.
///
/// Admission. A registration is admitted when scheduler::validate_registration accepts it (version,
/// token, node, topology, rank range, segment, layout checksum), the registry is not stopping,
/// and its rank has no live worker. A rank that was live before and was lost may come back only
/// with a higher incarnation than the last one admitted (the coordinator treats the current
/// incarnation of a lost rank as stale). A rank registered for the first time may use any
/// incarnation but the largest (which would leave its restarts nowhere to go). Every refusal is
/// returned as one status and changes nothing.
///
/// Stop. begin_stop() marks the registry stopping (no more admissions) and returns the ranks
/// whose workers must be told to stop, once; the stop is complete when no rank is live.
///
/// Pure: no CAF, no threads, no clock. Not thread-safe: one actor owns it.
#include <cstdint>
#include <optional>
#include <vector>

#include "actors/scheduler/handshake.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

class worker_registry {
 public:
  /// errc::invalid_argument when scheduler::validate_expectation refuses `want`.
  static result<worker_registry> create(scheduler::handshake_expectation want);

  /// Admits the worker (its rank becomes live with its incarnation) or says why not: the
  /// handshake's own errors; errc::not_ready while stopping; errc::protocol_mismatch for a rank
  /// that is live already or an incarnation not above the rank's last one. Nothing changes on
  /// error.
  status admit(const worker_registration& reg);

  /// The rank's worker is gone. errc::not_found when the rank is not live (unknown or lost).
  status remove(rank_id rank);

  /// Starts stopping: the live ranks to tell, in rank order; empty when a stop began before.
  std::vector<rank_id> begin_stop();
  bool stopping() const noexcept { return stopping_; }
  /// Stopping and no rank is live any more.
  bool stop_complete() const noexcept { return stopping_ && live_ == 0; }
  /// Workers told to stop by begin_stop.
  uint32_t stopped() const noexcept { return stopped_; }

  bool is_live(rank_id rank) const noexcept;
  /// The incarnation last admitted for `rank`; std::nullopt if it never registered.
  std::optional<uint32_t> incarnation(rank_id rank) const noexcept;
  uint32_t world_size() const noexcept { return static_cast<uint32_t>(ranks_.size()); }
  uint32_t live_count() const noexcept { return live_; }
  /// Every rank has a live worker.
  bool complete() const noexcept { return live_ == ranks_.size(); }
  const scheduler::handshake_expectation& expectation() const noexcept { return want_; }

 private:
  struct rank_state {
    bool live = false;
    std::optional<uint32_t> incarnation;
  };

  explicit worker_registry(scheduler::handshake_expectation want);

  scheduler::handshake_expectation want_;
  std::vector<rank_state> ranks_;
  uint32_t live_ = 0;
  bool stopping_ = false;
  uint32_t stopped_ = 0;
};

}  // namespace kvc::scheduler
