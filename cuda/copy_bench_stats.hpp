#pragma once
/// copy_bench_stats: the pure arithmetic of `kvconnect bench copy`: percentiles of measured
/// times, throughput and its ratio to the DMA ceiling, and the vLLM-like transfer shapes the
/// bench runs (R regions x n blocks of one page size, or whole blocks). No clock, no device:
/// values in, values out. Stateless free functions, safe from any thread.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "proto/status.hpp"

namespace kvc::cuda {

/// One transfer shape: `regions` KV regions (layers x K/V), each with `blocks` pages of
/// `page_bytes`; one copy op per (region, block).
struct copy_shape {
  std::string label;
  uint32_t regions = 1;
  uint32_t blocks = 1;
  uint64_t page_bytes = 0;

  uint64_t ops() const noexcept { return uint64_t{regions} * blocks; }
  uint64_t bytes() const noexcept { return ops() * page_bytes; }
};

/// The default shapes for a working set of about `working_set` bytes: 16, 32 and 64 KiB pages
/// over `regions` regions, and 2 MiB blocks in one region. errc::invalid_argument when the set
/// cannot hold one page of each shape or regions is 0.
result<std::vector<copy_shape>> vllm_like_shapes(uint64_t working_set, uint32_t regions);

/// Nearest-rank percentile (p in [0, 100]) of `values`; errc::invalid_argument when empty or p
/// is out of range.
result<double> percentile(std::span<const double> values, double p);

/// Bytes per second as GB/s (1e9); 0 when seconds is not positive.
double gbps(uint64_t bytes, double seconds) noexcept;

/// measured / ceiling; 0 when the ceiling is not positive.
double ratio_to_ceiling(double measured_gbps, double ceiling_gbps) noexcept;

}  // namespace kvc::cuda
