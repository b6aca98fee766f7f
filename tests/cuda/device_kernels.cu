#include "tests/cuda/device_kernels.hpp"

#include <cuda_runtime_api.h>

namespace kvc::cuda::testing {

namespace {

constexpr unsigned threads = 256;

__device__ void spin(int64_t cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void spin_then_fill(uint8_t* dst, size_t n, uint8_t value, int64_t cycles) {
  if (threadIdx.x == 0) spin(cycles);
  __syncthreads();
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = value;
}

__global__ void spin_then_copy(const uint8_t* src, uint8_t* dst, size_t n, int64_t cycles) {
  if (threadIdx.x == 0) spin(cycles);
  __syncthreads();
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

__global__ void wait_for_flag(const volatile int* flag, int* timed_out, int64_t max_cycles) {
  const long long start = clock64();
  while (*flag == 0) {
    if (clock64() - start >= max_cycles) {
      *timed_out = 1;
      return;
    }
  }
}

__global__ void write_through(int* bad) { *bad = 1; }

int launched() { return static_cast<int>(cudaGetLastError()); }

}  // namespace

int launch_spin_then_fill(void* stream, void* dst, size_t n, uint8_t value, int64_t cycles) {
  spin_then_fill<<<1, threads, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<uint8_t*>(dst),
                                                                        n, value, cycles);
  return launched();
}

int launch_spin_then_copy(void* stream, const void* src, void* dst, size_t n, int64_t cycles) {
  spin_then_copy<<<1, threads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, cycles);
  return launched();
}

int launch_wait_for_flag(void* stream, const int* flag, int* timed_out, int64_t max_cycles) {
  wait_for_flag<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flag, timed_out, max_cycles);
  return launched();
}

int launch_write_through(void* stream, int* bad) {
  write_through<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(bad);
  return launched();
}

}  // namespace kvc::cuda::testing
