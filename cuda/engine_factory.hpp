#pragma once
/// engine_factory: picks a copy_engine backend at run time from its name, so callers never see
/// #ifdef CUDA. Backends:
///   "sim"     always built; host memory for GPU memory, copy threads complete transfers.
///   "manual"  always built; host memory for GPU memory, deterministic: a transfer completes only
///             when the owner waits for it or advances the engine (manual_copy_engine). For tests
///             and soaks; a run that only polls would never see a transfer finish.
///   "cuda"    built when nvcc is found; needs a device.
/// Stateless, thread-safe.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/device_health.hpp"
#include "cuda/gather_plan.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

struct engine_options {
  std::string backend = "sim";  ///< "sim", "manual" or "cuda"
  int device = 0;  ///< CUDA device ordinal (the sim backend checks only that it is >= 0)
  /// cuda: the longest one wait() blocks before answering errc::timeout.
  std::chrono::milliseconds wait_timeout{60'000};
  /// cuda, tests only: simulates CUDA failures (see device_health); empty in real runs.
  device_health::failure_hook failure_hook{};
  /// cuda: send a transfer's ops as one cudaMemcpyBatchAsync when the driver takes it; false
  /// forces per-op cudaMemcpyAsync (tests compare the two paths).
  bool batch_copies = true;
  /// cuda: the largest chunk register_host pins with one cudaHostRegister (whole slots each;
  /// pin_chunk_plan). Tests use a few slots to put ops on chunk boundaries.
  size_t pin_chunk_bytes = size_t{64} << 30;
  /// cuda: which transfers the gather kernel copies (gather_plan.hpp). `memcpy` (the default)
  /// uses the DMA engines only; `kernel` / `auto` need a device that can use host pointers of
  /// registered memory (else create() refuses `kernel`, and `auto` copies with memcpy).
  copy_path path = copy_path::memcpy;
  gather_limits gather{};
};

/// "sim" and "manual" always; "cuda" when built and a device is present, else
/// errc::device_unavailable with a clear message. An unknown backend name or a negative device is
/// errc::invalid_argument.
result<std::unique_ptr<copy_engine>> make_copy_engine(const engine_options& opts);

/// Backends compiled into this binary, e.g. {"sim","manual","cuda"}; "sim" is always first.
std::vector<std::string> built_backends();

}  // namespace kvc::cuda
