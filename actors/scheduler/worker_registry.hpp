#pragma once
/// worker_registry: which ranks of the scheduler's node have a live worker, and whether a new
/// worker may register. The pure core of the scheduler actor's registration and step fan-out
/// decisions; the actor keeps the worker handles and calls it.
///
/// Admission. A registration is admitted when runtime::validate_registration accepts it (version,
/// token, node, topology, rank range, segment, layout checksum) and its rank has no live worker.
/// A rank that was live before and was lost may come back only with a higher incarnation than
/// the last one admitted (the coordinator treats the current incarnation of a lost rank as
/// stale). A rank registered for the first time may use any incarnation. Every refusal is
/// returned as one status and changes nothing.
///
/// Steps. begin_step() accepts strictly increasing step ids only: each rank must report its steps
/// in order, so a step that goes back would be refused by every worker and the coordinator.
///
/// Pure: no CAF, no threads, no clock. Not thread-safe: one actor owns it.
#include <cstdint>
#include <optional>
#include <vector>

#include "actors/runtime/handshake.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

class worker_registry {
 public:
  /// errc::invalid_argument when runtime::validate_expectation refuses `want`.
  static result<worker_registry> create(runtime::handshake_expectation want);

  /// Admits the worker (its rank becomes live with its incarnation) or says why not: the
  /// handshake's own errors, or errc::protocol_mismatch for a rank that is live already or an
  /// incarnation not above the rank's last one. Nothing changes on error.
  status admit(const runtime::worker_registration& reg);

  /// The rank's worker is gone. errc::not_found when the rank is not live (unknown or lost).
  status remove(rank_id rank);

  /// The next step to fan out: errc::invalid_argument unless `step` is above every step begun
  /// before. Nothing changes on error.
  status begin_step(step_id step);

  bool is_live(rank_id rank) const noexcept;
  /// The incarnation last admitted for `rank`; std::nullopt if it never registered.
  std::optional<uint32_t> incarnation(rank_id rank) const noexcept;
  uint32_t world_size() const noexcept { return static_cast<uint32_t>(ranks_.size()); }
  uint32_t live_count() const noexcept { return live_; }
  /// Every rank has a live worker.
  bool complete() const noexcept { return live_ == ranks_.size(); }
  std::optional<step_id> last_step() const noexcept { return last_step_; }
  const runtime::handshake_expectation& expectation() const noexcept { return want_; }

 private:
  struct rank_state {
    bool live = false;
    std::optional<uint32_t> incarnation;
  };

  explicit worker_registry(runtime::handshake_expectation want);

  runtime::handshake_expectation want_;
  std::vector<rank_state> ranks_;
  uint32_t live_ = 0;
  std::optional<step_id> last_step_;
};

}  // namespace kvc::scheduler
