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
/// Pure (no CAF, no clock); worker_registration and its CAF inspect overload live in
/// proto/registration.hpp. Plain values: thread-safe to copy and read.
#include <cstdint>
#include <string>

#include "proto/ids.hpp"
#include "proto/registration.hpp"
#include "proto/status.hpp"
#include "proto/topology.hpp"

namespace kvc::scheduler {

/// What the scheduler expects of every worker registering with it. One node (nodes == 1):
/// workers of topology.node, attached to `segment`. A multi-node launch (nodes > 1): the
/// scheduler on node 0 serves the workers of nodes 0..nodes-1; each node has its own segment of
/// the same layout, so a worker of another node must match the layout checksum, and only a
/// worker of the scheduler's node must name `segment`.
struct handshake_expectation {
  kvc::topology topology;
  std::string segment;
  uint64_t layout_checksum = 0;
  std::string token;
  uint32_t nodes = 1;

  uint32_t world_size() const noexcept { return topology.world_size(); }
};

/// Checks the expectation itself: a valid topology (kvc::validate), a segment name, a token and
/// 1 <= nodes (node < nodes). errc::invalid_argument naming the bad field otherwise.
status validate_expectation(const handshake_expectation& want);

/// Compares a registration with the expectation, in this order: protocol version, token
/// (errc::protocol_mismatch), node (the scheduler's, or below `nodes`) and TP/PP sizes
/// (errc::protocol_mismatch), the rank's
/// coordinates: tp_rank < tp_size, pp_rank < pp_size, rank < world and rank == pp_rank * tp_size
/// + tp_rank (errc::invalid_argument), then segment name (the scheduler's node only) and layout
/// checksum (errc::layout_mismatch). The first difference is returned; success when all match.
status validate_registration(const handshake_expectation& want, const worker_registration& got);

/// The registration rank `rank` sends, with the fields derived from `want` (the worker builds
/// its own expectation from its configuration).
worker_registration make_registration(const handshake_expectation& want, rank_id rank,
                                      uint32_t incarnation, int64_t pid);

}  // namespace kvc::scheduler
