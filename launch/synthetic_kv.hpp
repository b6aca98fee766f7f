#pragma once
/// The standalone worker's KV cache: `layers` per-layer tensors of shape (gpu_blocks,
/// page_bytes) in the rank's "GPU" memory, every byte written at start-up from
/// kv_pattern(rank, layer, block, offset), so that another process (the scheduler's smoke
/// engine, a test) can check what a store put into the pool and, by storing a loaded block
/// again, what a load brought back. No CAF.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "actors/embed/worker_connector.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// Shape of the synthetic KV cache; one offloaded block is block_factor GPU blocks of every
/// layer, so a CPU slot must hold slot_bytes().
struct synthetic_kv_spec {
  uint32_t layers = 2;
  uint64_t page_bytes = 4096;  ///< bytes of one GPU block of one layer
  uint32_t gpu_blocks = 64;    ///< per layer; block 0 is vLLM's null block
  uint32_t block_factor = 1;   ///< GPU blocks per offloaded block

  uint64_t slot_bytes() const noexcept { return uint64_t{block_factor} * layers * page_bytes; }
};

/// layers, page_bytes, block_factor >= 1, gpu_blocks >= 2, sizes without overflow;
/// errc::invalid_argument naming the field otherwise.
status validate(const synthetic_kv_spec& kv);

/// Byte `offset` of GPU block `block` of `layer` on `rank`, as the synthetic cache holds it.
std::byte kv_pattern(rank_id rank, uint32_t layer, gpu_block block, uint64_t offset) noexcept;

/// Allocates the cache in the rank's copy engine, writes the pattern and registers the
/// tensors with the rank's connector. The buffers belong to the engine (freed with it).
status install_synthetic_kv(embed::worker_connector& wc, const synthetic_kv_spec& kv);

}  // namespace kvc::launch
