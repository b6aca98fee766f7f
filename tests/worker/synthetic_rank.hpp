#pragma once
/// Test support: one rank's rank_runtime over a heap buffer standing in for its region of the shm
/// pool, with the real sim copy engine (kept by pointer for pause/resume), and helpers to build
/// jobs and to check what a store wrote into a slot. Single-threaded use.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "actors/worker/rank_runtime.hpp"
#include "cuda/sim_copy_engine.hpp"
#include "proto/connector_metadata.hpp"

namespace kvc::worker::testing {

inline constexpr synthetic_kv_spec small_kv{
    .layers = 2, .page_bytes = 64, .gpu_blocks = 16, .block_factor = 2};
inline constexpr uint32_t small_slots = 4;

struct synthetic_rank {
  explicit synthetic_rank(rank_id r = 0, synthetic_kv_spec spec = small_kv,
                          uint32_t slots = small_slots)
      : rank(r), kv(spec), num_slots(slots), pool(spec.slot_bytes() * slots) {}

  /// Builds the runtime (what the worker actor's factory does). Call once.
  result<std::unique_ptr<rank_runtime>> make() {
    auto engine = std::make_unique<cuda::sim_copy_engine>();
    sim = engine.get();
    auto rt = rank_runtime::over_region(rank, kv, std::move(engine),
                                        {pool.data(), kv.slot_bytes(), num_slots});
    if (rt) runtime = rt->get();
    return rt;
  }

  /// The bytes slot `s` must hold after storing `blocks` (block_factor GPU blocks).
  bool slot_holds(cpu_slot s, const std::vector<gpu_block>& blocks) const {
    const std::byte* slot = pool.data() + s * kv.slot_bytes();
    for (size_t j = 0; j < blocks.size(); ++j) {
      for (uint32_t l = 0; l < kv.layers; ++l) {
        for (uint64_t o = 0; o < kv.page_bytes; ++o) {
          const std::byte got = slot[(j * kv.layers + l) * kv.page_bytes + o];
          if (got != kv_pattern(rank, l, blocks[j], o)) return false;
        }
      }
    }
    return true;
  }

  /// GPU block `dst` now holds what block `src` held at start-up, in every layer.
  bool gpu_block_holds(gpu_block dst, gpu_block src) {
    for (uint32_t l = 0; l < kv.layers; ++l) {
      auto page = runtime->read_gpu_page(l, dst);
      if (!page) return false;
      for (uint64_t o = 0; o < kv.page_bytes; ++o) {
        if ((*page)[o] != kv_pattern(rank, l, src, o)) return false;
      }
    }
    return true;
  }

  rank_id rank;
  synthetic_kv_spec kv;
  uint32_t num_slots;
  std::vector<std::byte> pool;
  cuda::sim_copy_engine* sim = nullptr;
  rank_runtime* runtime = nullptr;  // owned by whoever holds make()'s result
};

/// One step's metadata (designated initializers would leave -Wextra warnings).
inline connector_metadata step_meta(step_id step, std::vector<transfer_job> loads = {},
                                    std::vector<transfer_job> stores = {},
                                    std::vector<job_id> flush = {}) {
  connector_metadata m;
  m.step = step;
  m.loads = std::move(loads);
  m.stores = std::move(stores);
  m.flush = std::move(flush);
  return m;
}

inline transfer_job store_job(job_id id, std::vector<cpu_slot> slots,
                              std::vector<gpu_block> blocks) {
  return {
      id, "req-" + std::to_string(id), transfer_kind::store, std::move(slots), std::move(blocks),
      0};
}

inline transfer_job load_job(job_id id, std::vector<cpu_slot> slots,
                             std::vector<gpu_block> blocks) {
  return {id, "req-" + std::to_string(id), transfer_kind::load, std::move(slots), std::move(blocks),
          0};
}

}  // namespace kvc::worker::testing
