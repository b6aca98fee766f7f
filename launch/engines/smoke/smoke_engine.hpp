#pragma once
/// smoke_engine: the small engine loop `kvconnect scheduler --smoke-steps N` runs over the
/// embedding API's scheduler_connector, exactly as an engine would (lookups, allocation,
/// build_connector_meta, the step's output, request_finished), against real worker processes,
/// and the checks of what the workers did to the node's pool.
///
/// Steps come in rounds of three, one request and one job each (step id = k + 1):
///   k % 3 == 0  request a<i> with fresh keys on the source blocks S: stored into slot s1;
///               check: slot s1 of every rank holds S's bytes (kv_pattern of that rank)
///   k % 3 == 1  request b<i> with a<i>'s keys: a CPU hit, loaded into the destination blocks D
///   k % 3 == 2  request c<i> with fresh keys on D (the standalone worker runs no forward pass,
///               so D still holds what the load wrote): stored into slot s2; check: slot s2 of
///               every rank holds S's bytes, which proves the load brought the right bytes back
/// Round i uses source group i % groups (S in the lower half of the GPU blocks, D in the upper
/// half). Every job must succeed and move world_size * slot_bytes bytes.
///
/// With rank restarts allowed (restart.policy on-failure), a job that fails because a rank was
/// lost or restarted (errc::io_error) does not fail the run: it is counted (jobs_failed), the
/// rest of its round is skipped, and needs_workers() asks the caller to wait until every rank
/// is registered again before the next step. A round during which a rank was lost or restarted
/// (the coordinator's counters changed) skips its last check: a restarted worker's GPU blocks
/// no longer hold what the round loaded into them (rounds_interrupted). The pool's slots
/// survive a worker's restart, so a load after one is checked as any other.
///
/// Not thread-safe: the engine's scheduler thread owns it.
#include <chrono>
#include <cstdint>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "launch/engines/smoke/synthetic_kv.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

struct smoke_options {
  bool rank_restarts = false;  ///< a lost rank may come back (see smoke_engine)
  /// The node of every rank, several nodes: only node 0's ranks' slots are in the segment the
  /// scheduler reads, so only theirs are checked. Empty: every rank on node 0.
  std::vector<uint32_t> rank_nodes;
};

class smoke_engine {
 public:
  /// errc::invalid_argument unless the KV shape is valid, slots >= 2 and
  /// gpu_blocks >= 2 * block_factor + 1.
  static result<smoke_engine> create(uint32_t world_size, uint32_t slots,
                                     const synthetic_kv_spec& kv, smoke_options opts = {});

  /// The planner's block sizes the steps assume (one token per GPU block position).
  static constexpr uint32_t gpu_block_size = 4;

  /// Runs the k-th step (step id k + 1) through `sc` and waits up to `timeout` for its output;
  /// the first problem is returned (the smoke run fails).
  status run_step(embed::scheduler_connector& sc, uint64_t k, std::chrono::milliseconds timeout);

  /// A rank was lost: wait for every rank (scheduler_connector::wait_for_workers), then call
  /// workers_back(), before the next step.
  bool needs_workers() const noexcept { return needs_workers_; }
  void workers_back() noexcept { needs_workers_ = false; }

  uint64_t jobs_ok() const noexcept { return jobs_ok_; }
  uint64_t jobs_failed() const noexcept { return jobs_failed_; }
  uint64_t rounds_interrupted() const noexcept { return rounds_interrupted_; }
  uint64_t slots_checked() const noexcept { return slots_checked_; }
  uint64_t bytes_moved() const noexcept { return bytes_; }

 private:
  smoke_engine(uint32_t world_size, const synthetic_kv_spec& kv, smoke_options opts);

  /// Rank losses and restarts the coordinator has seen.
  static uint64_t membership(const embed::scheduler_connector& sc);
  /// The round ends early: the next step starts the next round.
  void skip_round();

  std::vector<gpu_block> blocks(uint64_t round, bool destination) const;
  std::vector<block_key> keys(uint64_t round, bool fresh) const;
  /// Checks the step's one job result, and the slot it stored into against `source` blocks
  /// (not when `interrupted`: a rank was lost or restarted since the round began).
  status check(const embed::connector_update& up, const connector_metadata& meta,
               const embed::scheduler_connector& sc, const std::vector<gpu_block>* source,
               bool interrupted);

  uint32_t world_size_;
  synthetic_kv_spec kv_;
  uint32_t half_;
  uint32_t groups_;
  bool rank_restarts_;
  std::vector<uint32_t> rank_nodes_;
  uint64_t round_ = 0;
  uint32_t phase_ = 0;             ///< 0: store a, 1: load b, 2: store c
  uint64_t round_membership_ = 0;  ///< membership() when the round's first step was planned
  bool needs_workers_ = false;
  uint64_t jobs_ok_ = 0;
  uint64_t jobs_failed_ = 0;
  uint64_t rounds_interrupted_ = 0;
  uint64_t slots_checked_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvc::launch
