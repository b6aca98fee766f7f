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
/// Not thread-safe: the engine's scheduler thread owns it.
#include <chrono>
#include <cstdint>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "launch/synthetic_kv.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

class smoke_engine {
 public:
  /// errc::invalid_argument unless the KV shape is valid, slots >= 2 and
  /// gpu_blocks >= 2 * block_factor + 1.
  static result<smoke_engine> create(uint32_t world_size, uint32_t slots,
                                     const synthetic_kv_spec& kv);

  /// The planner's block sizes the steps assume (one token per GPU block position).
  static constexpr uint32_t gpu_block_size = 4;

  /// Runs the k-th step through `sc` and waits up to `timeout` for its output; the first
  /// problem is returned (the smoke run fails).
  status run_step(embed::scheduler_connector& sc, uint64_t k, std::chrono::milliseconds timeout);

  uint64_t jobs_ok() const noexcept { return jobs_ok_; }
  uint64_t slots_checked() const noexcept { return slots_checked_; }
  uint64_t bytes_moved() const noexcept { return bytes_; }

 private:
  smoke_engine(uint32_t world_size, const synthetic_kv_spec& kv);

  std::vector<gpu_block> blocks(uint64_t round, bool destination) const;
  std::vector<block_key> keys(uint64_t round, bool fresh) const;
  /// Checks the step's one job result, and the slot it stored into against `source` blocks.
  status check(const embed::connector_update& up, const connector_metadata& meta,
               const embed::scheduler_connector& sc, const std::vector<gpu_block>* source);

  uint32_t world_size_;
  synthetic_kv_spec kv_;
  uint32_t half_;
  uint32_t groups_;
  uint64_t jobs_ok_ = 0;
  uint64_t slots_checked_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvc::launch
