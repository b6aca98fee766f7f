#pragma once
/// gather_kernel: the kernel behind copy_path::kernel (see gather_plan.hpp). One launch copies
/// every op of a transfer: block b takes descriptors (op chunks) b, b + gridDim.x, ...; its
/// threads copy 16-byte words, several loads in flight each, when both addresses are 16-byte
/// aligned, bytes otherwise (and for the tail).
/// Descriptors are read from mapped pinned host memory (the engine's ring), once per op by one
/// thread. CUDA code: included by .cu files of cuda/ only.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/gather_plan.hpp"

namespace kvc::cuda {

/// Enqueues the kernel on `stream` for `n` descriptors at device address `descs`; the launch's
/// error (cudaLaunchKernel's result; it sets nothing else).
cudaError_t launch_gather(const gather_desc* descs, uint32_t n, cudaStream_t stream);

/// Loads the kernel's module now (cudaFuncGetAttributes). CUDA loads modules lazily by default,
/// at a kernel's first launch, and that load may synchronise the context: inside a submit it
/// would stall the step behind the model's forward pass. The engine calls this when it is built.
cudaError_t load_gather();

}  // namespace kvc::cuda
