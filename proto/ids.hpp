#pragma once
/// Small integer identities shared by every process. Plain integers with names, so that
/// they serialise trivially and cost nothing.
#include <cstdint>

namespace kvc {

/// Index of a block slot in the node's pinned CPU pool (the same id on every rank).
using cpu_slot = uint32_t;
/// Index of a block in one GPU's KV cache (vLLM's block id; 0 is the null block).
using gpu_block = uint32_t;
/// A transfer job, numbered by one scheduler counter shared by loads and stores.
using job_id = uint64_t;
/// An engine step (one ConnectorMetadata per step).
using step_id = uint64_t;
/// A global rank in [0, world_size) = pp_rank * tp_size + tp_rank.
using rank_id = uint32_t;

}  // namespace kvc
