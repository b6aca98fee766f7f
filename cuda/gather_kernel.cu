#include "cuda/gather_kernel.cuh"

#include <algorithm>

namespace kvc::cuda {

namespace {

constexpr unsigned gather_threads = 256;
constexpr uint32_t gather_max_blocks = 1024;

__global__ void gather_copy(const gather_desc* descs, uint32_t n) {
  __shared__ gather_desc d;
  for (uint32_t i = blockIdx.x; i < n; i += gridDim.x) {
    if (threadIdx.x == 0) d = descs[i];
    __syncthreads();
    const auto* src = reinterpret_cast<const unsigned char*>(d.src);
    auto* dst = reinterpret_cast<unsigned char*>(d.dst);
    uint64_t done = 0;
    if (((d.src | d.dst) & 15u) == 0) {
      const uint64_t words = d.bytes / 16;
      const auto* s = reinterpret_cast<const uint4*>(src);
      auto* t = reinterpret_cast<uint4*>(dst);
      for (uint64_t k = threadIdx.x; k < words; k += blockDim.x) t[k] = s[k];
      done = words * 16;
    }
    for (uint64_t k = done + threadIdx.x; k < d.bytes; k += blockDim.x) dst[k] = src[k];
    __syncthreads();  // `d` is rewritten for the next op only after every thread used it
  }
}

}  // namespace

cudaError_t launch_gather(const gather_desc* descs, uint32_t n, cudaStream_t stream) {
  const dim3 grid(std::min(n, gather_max_blocks));
  const dim3 block(gather_threads);
  void* args[] = {&descs, &n};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&gather_copy), grid, block, args, 0,
                          stream);
}

}  // namespace kvc::cuda
