// dma_probe with CUDA: raw cudaMemcpyAsync baselines timed with events (see dma_probe.hpp).
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/dma_probe.hpp"

namespace kvc::cuda {

namespace {

status cuda_fail(cudaError_t e, const char* what) {
  (void)cudaGetLastError();
  const errc code = e == cudaErrorNoDevice || e == cudaErrorInvalidDevice ||
                            e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError ||
                            e == cudaErrorStubLibrary
                        ? errc::device_unavailable
                        : errc::device_error;
  return make_error(code, std::string("dma_probe: ") + what + ": " + cudaGetErrorName(e) + " (" +
                              cudaGetErrorString(e) + ")");
}

#define KVC_PROBE(call)                                  \
  do {                                                   \
    if (cudaError_t e_ = (call); e_ != cudaSuccess) {    \
      return cuda_fail(e_, #call);                       \
    }                                                    \
  } while (0)

/// Everything one probe holds, released in the destructor (also on early error returns).
struct probe_memory {
  void* host = nullptr;
  void* host2 = nullptr;
  void* dev = nullptr;
  void* dev2 = nullptr;
  cudaStream_t s[2] = {nullptr, nullptr};
  cudaEvent_t ev[4] = {nullptr, nullptr, nullptr, nullptr};
  ~probe_memory() {
    for (auto e : ev) if (e) cudaEventDestroy(e);
    for (auto st : s) if (st) cudaStreamDestroy(st);
    if (dev) cudaFree(dev);
    if (dev2) cudaFree(dev2);
    if (host) cudaFreeHost(host);
    if (host2) cudaFreeHost(host2);
  }
};

/// Times `enqueue` on stream 0 between events 0 and 1; the seconds go to `out`.
template <class Fn>
status time_on(probe_memory& m, Fn&& enqueue, double& out) {
  KVC_PROBE(cudaEventRecord(m.ev[0], m.s[0]));
  if (auto st = enqueue(); !st) return st;
  KVC_PROBE(cudaEventRecord(m.ev[1], m.s[0]));
  KVC_PROBE(cudaEventSynchronize(m.ev[1]));
  float ms = 0;
  KVC_PROBE(cudaEventElapsedTime(&ms, m.ev[0], m.ev[1]));
  out = ms / 1e3;
  return {};
}

double to_gbps(uint64_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0; }

}  // namespace

result<dma_probe_result> run_dma_probe(const dma_probe_options& o) {
  if (o.bytes == 0) return make_error(errc::invalid_argument, "dma_probe: zero bytes");
  if (o.page_bytes > o.bytes) {
    return make_error(errc::invalid_argument, "dma_probe: page larger than the working set");
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return cuda_fail(e, "cudaGetDeviceCount");
  }
  if (o.device < 0 || o.device >= count) {
    return make_error(errc::device_unavailable, "dma_probe: no CUDA device " +
                                                    std::to_string(o.device) + " (" +
                                                    std::to_string(count) + " present)");
  }
  KVC_PROBE(cudaSetDevice(o.device));
  probe_memory m;
  KVC_PROBE(cudaMallocHost(&m.host, o.bytes));
  KVC_PROBE(cudaMallocHost(&m.host2, o.bytes));
  KVC_PROBE(cudaMalloc(&m.dev, o.bytes));
  KVC_PROBE(cudaMalloc(&m.dev2, o.bytes));
  for (auto& st : m.s) KVC_PROBE(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (auto& e : m.ev) KVC_PROBE(cudaEventCreate(&e));

  auto whole = [&](void* dst, const void* src, cudaMemcpyKind k) {
    return [=, &m]() -> status {
      KVC_PROBE(cudaMemcpyAsync(dst, src, o.bytes, k, m.s[0]));
      return {};
    };
  };
  auto paged = [&](void* dst, const void* src, cudaMemcpyKind k) {
    return [=, &m]() -> status {
      for (uint64_t off = 0; off + o.page_bytes <= o.bytes; off += o.page_bytes) {
        KVC_PROBE(cudaMemcpyAsync(static_cast<char*>(dst) + off,
                                  static_cast<const char*>(src) + off, o.page_bytes, k, m.s[0]));
      }
      return {};
    };
  };
  const uint64_t paged_bytes = o.page_bytes ? o.bytes / o.page_bytes * o.page_bytes : 0;
  dma_probe_result r;
  for (uint32_t rep = 0; rep <= o.repeat; ++rep) {  // repetition 0 warms up
    double h2d = 0, d2h = 0, ph2d = 0, pd2h = 0, both = 0;
    if (auto st = time_on(m, whole(m.dev, m.host, cudaMemcpyHostToDevice), h2d); !st) return st;
    if (auto st = time_on(m, whole(m.host, m.dev, cudaMemcpyDeviceToHost), d2h); !st) return st;
    if (o.page_bytes) {
      if (auto st = time_on(m, paged(m.dev, m.host, cudaMemcpyHostToDevice), ph2d); !st) return st;
      if (auto st = time_on(m, paged(m.host, m.dev, cudaMemcpyDeviceToHost), pd2h); !st) return st;
    }
    // Both directions at once: stream 1 starts after event 2 (recorded on stream 0), event 3
    // marks its end; stream 0 waits for it before its own end event.
    auto concurrent = [&]() -> status {
      KVC_PROBE(cudaEventRecord(m.ev[2], m.s[0]));
      KVC_PROBE(cudaStreamWaitEvent(m.s[1], m.ev[2], 0));
      KVC_PROBE(cudaMemcpyAsync(m.dev, m.host, o.bytes, cudaMemcpyHostToDevice, m.s[0]));
      KVC_PROBE(cudaMemcpyAsync(m.host2, m.dev2, o.bytes, cudaMemcpyDeviceToHost, m.s[1]));
      KVC_PROBE(cudaEventRecord(m.ev[3], m.s[1]));
      KVC_PROBE(cudaStreamWaitEvent(m.s[0], m.ev[3], 0));
      return {};
    };
    if (auto st = time_on(m, concurrent, both); !st) return st;
    if (rep == 0) continue;
    r.h2d_whole = std::max(r.h2d_whole, to_gbps(o.bytes, h2d));
    r.d2h_whole = std::max(r.d2h_whole, to_gbps(o.bytes, d2h));
    r.h2d_per_page = std::max(r.h2d_per_page, to_gbps(paged_bytes, ph2d));
    r.d2h_per_page = std::max(r.d2h_per_page, to_gbps(paged_bytes, pd2h));
    r.bidirectional = std::max(r.bidirectional, to_gbps(2 * o.bytes, both));
  }
  return r;
}

}  // namespace kvc::cuda
