#include "cuda/gather_kernel.cuh"

#include <algorithm>

namespace kvc::cuda {

namespace {

constexpr unsigned gather_threads = 256;
constexpr uint32_t gather_max_blocks = 1024;
/// 16-byte loads each thread has in flight before it stores them: over PCIe a load takes about
/// a microsecond, so one load per thread would leave the link mostly idle.
constexpr int words_in_flight = 4;

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
      const uint64_t stride = blockDim.x;
      uint64_t k = threadIdx.x;
      for (; k + (words_in_flight - 1) * stride < words; k += words_in_flight * stride) {
        uint4 v[words_in_flight];
#pragma unroll
        for (int u = 0; u < words_in_flight; ++u) v[u] = s[k + u * stride];
#pragma unroll
        for (int u = 0; u < words_in_flight; ++u) t[k + u * stride] = v[u];
      }
      for (; k < words; k += stride) t[k] = s[k];
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

cudaError_t load_gather() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(&gather_copy));
}

}  // namespace kvc::cuda
