#pragma once
/// kv_content: what the simulated model writes into the KV cache. The KV of the token at
/// position p is a pure function of the tokens [0, p] (through a chained per-token hash), of the
/// layer and of the rank, so anyone who knows a request's tokens knows the exact bytes every
/// GPU block must hold, and a block loaded from the CPU pool is checked byte for byte. A GPU
/// block's prefix-cache hash is the token hash at its last token, so requests that share a
/// prefix share block hashes (and CPU pool keys).
///
/// The KV cache of one rank: one tensor per layer of shape (gpu_blocks, page_bytes); token slot
/// s of a block holds bytes [s * token_bytes, (s + 1) * token_bytes) of the block's page, with
/// token_bytes = page_bytes / gpu_block_size. Pure functions.
#include <cstddef>
#include <cstdint>
#include <span>

#include "proto/block_key.hpp"
#include "proto/ids.hpp"

namespace kvc::sim {

/// The hash of tokens [0, p] from the hash of [0, p) (0 for p == 0) and token p.
uint64_t chain(uint64_t previous, uint32_t token) noexcept;

/// The prefix-cache hash (and CPU pool key source) of a block whose last token hash is `h`.
block_key block_hash_of(uint64_t h) noexcept;

/// Fills `out` with the KV bytes of the token whose chained hash is `h`, in `layer` on `rank`.
void token_kv(uint64_t h, uint32_t layer, rank_id rank, std::span<std::byte> out) noexcept;

}  // namespace kvc::sim
