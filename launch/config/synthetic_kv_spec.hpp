#pragma once
/// The shape of the standalone worker's synthetic KV cache (the smoke run's,
/// launch/engines/smoke/synthetic_kv.hpp): part of the plan a config derives, so plain data and
/// its check here. No CAF.
#include <cstdint>

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

}  // namespace kvc::launch
