#pragma once
/// dma_probe: raw-CUDA baselines for `kvconnect bench copy --backend cuda`, with no engine in
/// between: the DMA ceiling (one cudaMemcpyAsync of the whole working set per direction, pinned
/// host memory <-> one device buffer), a per-page cudaMemcpyAsync loop over the same bytes, and
/// both directions at once on two streams. Times come from CUDA events, the best of `repeat`.
/// A pure-C++ interface: callers need no CUDA header. Without a CUDA build or a device every
/// call answers errc::device_unavailable saying why. Each call allocates and frees its own
/// memory; not meant to run concurrently with itself on one device.
#include <cstdint>

#include "proto/status.hpp"

namespace kvc::cuda {

struct dma_probe_options {
  int device = 0;
  uint64_t bytes = 0;       ///< the working set
  uint64_t page_bytes = 0;  ///< per-page loop granularity (0: skip the loop)
  uint32_t repeat = 3;
};

/// GB/s (1e9 B/s) of each baseline, best repetition.
struct dma_probe_result {
  double h2d_whole = 0;     ///< ceiling, cpu_to_gpu
  double d2h_whole = 0;     ///< ceiling, gpu_to_cpu
  double h2d_per_page = 0;  ///< one cudaMemcpyAsync per page, cpu_to_gpu
  double d2h_per_page = 0;
  double bidirectional = 0;  ///< both whole copies at once, total bytes / elapsed
};

/// Runs the baselines; errc::device_unavailable without CUDA or the device, errc::invalid_argument
/// for zero bytes or a page larger than the set, errc::device_error naming the CUDA error.
result<dma_probe_result> run_dma_probe(const dma_probe_options& opts);

}  // namespace kvc::cuda
