#pragma once
/// smoke_plan: the steps `kvconnect scheduler --smoke-steps N` drives through real worker
/// processes, and the checks of what they did to the node's pool. Pure (no CAF, no clock).
///
/// Steps come in rounds of three, one job each (job id = step = k + 1 for the k-th step):
///   k % 3 == 0  store the source blocks S (factor GPU blocks) into slot s1;
///               check: slot s1 of every rank holds S's bytes (kv_pattern of that rank)
///   k % 3 == 1  load slot s1 into the destination blocks D
///   k % 3 == 2  store D into slot s2; check: slot s2 of every rank holds S's bytes, which
///               proves the load brought the right bytes back into GPU memory
/// Round i uses source group i % groups (groups = ((gpu_blocks - 1) / 2) / factor; S in the
/// lower half of the GPU blocks, D in the upper half) and slots s1 = 2i % slots,
/// s2 = (2i + 1) % slots. Every job must succeed and move world_size * slot_bytes bytes in total.
///
/// The caller sends step(k), then feeds every connector_output to on_output until done(k).
/// Not thread-safe: one owner.
#include <cstdint>
#include <vector>

#include "actors/worker/rank_runtime.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"
#include "shm/segment.hpp"

namespace kvc::launch {

class smoke_plan {
 public:
  /// errc::invalid_argument unless the KV shape is valid, slots >= 2 and
  /// gpu_blocks >= 2 * block_factor + 1.
  static result<smoke_plan> create(uint32_t world_size, uint32_t slots,
                                   const worker::synthetic_kv_spec& kv);

  /// The metadata of the k-th step (step id k + 1). Remembers the job as issued.
  connector_metadata step(uint64_t k);
  /// Takes the results of issued jobs: each must be ok with the expected bytes; stores are
  /// checked against the pool. The first problem is returned (the smoke run fails); results of
  /// jobs not issued, or twice, are problems too.
  status on_output(const connector_output& out, const shm::segment& pool);
  /// The k-th step's job has its result.
  bool done(uint64_t k) const { return k < results_.size() && results_[k]; }

  uint64_t jobs_ok() const noexcept { return jobs_ok_; }
  uint64_t slots_checked() const noexcept { return slots_checked_; }
  uint64_t bytes_moved() const noexcept { return bytes_; }

 private:
  smoke_plan(uint32_t world_size, uint32_t slots, const worker::synthetic_kv_spec& kv);

  std::vector<gpu_block> source(uint64_t round) const;
  std::vector<gpu_block> destination(uint64_t round) const;
  /// Counts the slot as checked when it matches.
  status check_slot(const shm::segment& pool, cpu_slot slot, const std::vector<gpu_block>& blocks);

  uint32_t world_size_;
  uint32_t slots_;
  worker::synthetic_kv_spec kv_;
  uint32_t half_;
  uint32_t groups_;
  std::vector<bool> results_;  // by k; size = steps issued
  uint64_t jobs_ok_ = 0;
  uint64_t slots_checked_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace kvc::launch
