#pragma once
/// The standalone worker's KV cache: `layers` per-layer tensors of shape (gpu_blocks,
/// page_bytes) in the rank's "GPU" memory, every byte written at start-up from
/// kv_pattern(rank, layer, block, offset), so that another process (the scheduler's smoke
/// engine, a test) can check what a store put into the pool and, by storing a loaded block
/// again, what a load brought back. Its shape, synthetic_kv_spec, is part of the plan
/// (launch/config/synthetic_kv_spec.hpp). No CAF.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "actors/embed/worker_connector.hpp"
#include "launch/config/synthetic_kv_spec.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// Byte `offset` of GPU block `block` of `layer` on `rank`, as the synthetic cache holds it.
std::byte kv_pattern(rank_id rank, uint32_t layer, gpu_block block, uint64_t offset) noexcept;

/// Allocates the cache in the rank's copy engine, writes the pattern and registers the
/// tensors with the rank's connector. The buffers belong to the engine (freed with it).
status install_synthetic_kv(embed::worker_connector& wc, const synthetic_kv_spec& kv);

}  // namespace kvc::launch
