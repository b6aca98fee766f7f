#pragma once
/// gather_plan: whether a transfer's ops go to the gather kernel, and the descriptors the kernel
/// reads. The gather kernel (cuda backend, engine_options::copy_path) copies all ops of a
/// transfer in one launch, each CUDA block taking ops in turn and reading the pinned pool
/// through its host addresses (registered mapped); it saves the per-op cost of copy-engine
/// submissions for many small pages, at the price of SMs the model's compute also uses.
///
/// Descriptors: one per chunk of at most `chunk_bytes` of an op, so that an op of a large block
/// is copied by many CUDA blocks at once (one block per op would keep too little in flight to
/// fill the link); small pages are one descriptor each.
///
/// Selection: `kernel` takes every transfer whose ops make 1..max_ops descriptors; `auto_select` only those of at
/// least two ops that are all at most `auto_max_op_bytes` (small pages; large blocks keep the
/// DMA engines, which reach the link's bandwidth without SMs); `memcpy` none. A transfer the
/// kernel does not take is copied with cudaMemcpyBatchAsync / cudaMemcpyAsync as before.
/// Pure functions.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

enum class copy_path : uint8_t { memcpy = 0, kernel = 1, auto_select = 2 };

/// "memcpy", "kernel" or "auto".
std::string_view to_string(copy_path p) noexcept;
/// The inverse of to_string; errc::invalid_argument naming the three for anything else.
result<copy_path> parse_copy_path(std::string_view text);

/// One op as the kernel reads it: addresses the device can use, and the byte count.
struct gather_desc {
  uint64_t src = 0;
  uint64_t dst = 0;
  uint64_t bytes = 0;

  friend bool operator==(const gather_desc&, const gather_desc&) = default;
};

struct gather_limits {
  size_t max_ops = 4096;                         ///< descriptors one ring slot holds
  size_t auto_max_op_bytes = size_t{256} << 10;  ///< auto_select: the largest "small page"
  size_t chunk_bytes = size_t{64} << 10;         ///< the most bytes one descriptor copies
};

/// Descriptors `ops` make: the sum over ops of ceil(bytes / chunk_bytes).
size_t gather_desc_count(std::span<const copy_op> ops, size_t chunk_bytes) noexcept;

/// Whether a transfer of `ops` takes the gather kernel under `path`.
bool takes_gather(copy_path path, std::span<const copy_op> ops,
                  const gather_limits& limits) noexcept;

/// Writes the descriptors of `ops` in order (each op cut into chunks of at most `chunk_bytes`)
/// into `out`, never past its end; returns how many it wrote. The pool's host addresses are used
/// as they are: the engine enables the kernel only on a device that can use host pointers of
/// registered memory (cudaDevAttrCanUseHostPointerForRegisteredMem).
size_t fill_gather_descs(std::span<const copy_op> ops, std::span<gather_desc> out,
                         size_t chunk_bytes) noexcept;

}  // namespace kvc::cuda
