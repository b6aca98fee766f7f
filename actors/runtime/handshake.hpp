#pragma once
/// The registration handshake between a worker and the scheduler: what a worker says about
/// itself (worker_registration, sent with hello_atom), what the scheduler expects of every worker
/// of its node (handshake_expectation), and the pure check that compares the two.
///
/// The check is stateless: whether a rank is already live, or restarted with a stale
/// incarnation, is decided by scheduler::worker_registry, which calls it first. Every refusal is
/// one status naming the field that differs, worded so that both sides can log it as is (the
/// scheduler logs it, the worker prints it and exits non-zero). The token is never echoed.
///
/// Pure (no CAF, no clock); the inspect overload lets CAF serialise the struct without this file
/// depending on CAF. Plain values: thread-safe to copy and read.
#include <cstdint>
#include <string>

#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::runtime {

/// Version of the messages between scheduler, coordinator and workers (docs/protocol.md). Bump it
/// whenever a message or its meaning changes; peers of another version are refused.
/// 2: the registration reply carries the data-plane endpoint; the engine's connect-mode
///    messages (kvc_engine, kvc_submit, kvc_ready).
/// 3: a step's messages travel only on the step channel (no CAF metadata, reports, expect or
///    connect mode); workers are stopped with kvc_stop.
inline constexpr uint32_t protocol_version = 3;

/// Largest TP x PP world a scheduler accepts (the coordinator's bitsets hold 256 ranks).
inline constexpr uint32_t max_world_size = 256;

/// What a worker tells the scheduler when it registers.
struct worker_registration {
  uint32_t protocol_version = 0;
  rank_id rank = 0;  ///< global rank = pp_rank * tp_size + tp_rank
  uint32_t tp_size = 0;
  uint32_t pp_size = 0;
  uint32_t tp_rank = 0;
  uint32_t pp_rank = 0;
  uint32_t node = 0;
  /// Bumped by the launcher whenever the rank's process restarts; a restarted rank must register
  /// with a higher incarnation than the one it had.
  uint32_t incarnation = 0;
  /// The shm segment the worker will attach and the checksum of the layout it expects there
  /// (shm::layout_checksum of the geometry derived from its own configuration).
  std::string segment;
  uint64_t layout_checksum = 0;
  /// Shared secret of the deployment.
  std::string token;
  /// The worker's process id, for logs only.
  int64_t pid = 0;

  friend bool operator==(const worker_registration&, const worker_registration&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_registration& x) {
  return f(x.protocol_version, x.rank, x.tp_size, x.pp_size, x.tp_rank, x.pp_rank, x.node,
           x.incarnation, x.segment, x.layout_checksum, x.token, x.pid);
}

/// What the scheduler of one node expects of every worker registering with it.
struct handshake_expectation {
  uint32_t tp_size = 1;
  uint32_t pp_size = 1;
  uint32_t node = 0;
  std::string segment;
  uint64_t layout_checksum = 0;
  std::string token;

  uint32_t world_size() const noexcept { return tp_size * pp_size; }
};

/// Checks the expectation itself: tp_size, pp_size >= 1, world size <= max_world_size, a
/// segment name and a token. errc::invalid_argument naming the bad field otherwise.
status validate_expectation(const handshake_expectation& want);

/// Compares a registration with the expectation, in this order: protocol version, token
/// (errc::protocol_mismatch), node and TP/PP sizes (errc::protocol_mismatch), the rank's
/// coordinates: tp_rank < tp_size, pp_rank < pp_size, rank < world and rank == pp_rank * tp_size
/// + tp_rank (errc::invalid_argument), then segment name and layout checksum
/// (errc::layout_mismatch). The first difference is returned; success when all match.
status validate_registration(const handshake_expectation& want, const worker_registration& got);

/// The registration a worker at (tp_rank, pp_rank) sends, with the fields derived from `want`
/// (handy for tests and for the worker process, which builds its own expectation from flags).
worker_registration make_registration(const handshake_expectation& want, uint32_t tp_rank,
                                      uint32_t pp_rank, uint32_t incarnation, int64_t pid);

}  // namespace kvc::runtime
