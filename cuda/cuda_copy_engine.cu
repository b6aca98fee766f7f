#include "cuda/cuda_copy_engine.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "cuda/op_validator.hpp"

namespace kvc::cuda {

namespace {

constexpr size_t k_register_chunk = size_t{64} << 30;  // cudaHostRegister limit we respect

bool means_no_device(cudaError_t e) {
  switch (e) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

status cuda_error(cudaError_t e, std::string_view what) {
  return make_error(means_no_device(e) ? errc::device_unavailable : errc::device_error,
                    "cuda copy engine: " + std::string(what) + ": " + describe(e));
}

}  // namespace

result<std::unique_ptr<copy_engine>> cuda_copy_engine::create(int device) {
  int n = 0;  // left unwritten when the call fails
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return make_error(errc::device_unavailable,
                      "cuda copy engine: no usable CUDA driver or device: cudaGetDeviceCount "
                      "returned " +
                          describe(e));
  }
  if (n == 0) return make_error(errc::device_unavailable, "cuda copy engine: no CUDA device");
  if (device < 0 || device >= n) {
    return make_error(errc::device_unavailable, "cuda copy engine: device " +
                                                    std::to_string(device) + " out of range (" +
                                                    std::to_string(n) + " device(s))");
  }
  std::unique_ptr<cuda_copy_engine> engine(new cuda_copy_engine(device));
  if (status s = engine->init(); !s) return s;
  return std::unique_ptr<copy_engine>(std::move(engine));
}

cuda_copy_engine::cuda_copy_engine(int device) : device_(device) {}

status cuda_copy_engine::set_device() {
  const cudaError_t e = cudaSetDevice(device_);
  return e == cudaSuccess ? status{}
                          : cuda_error(e, "cudaSetDevice(" + std::to_string(device_) + ")");
}

status cuda_copy_engine::init() {
  if (status s = set_device(); !s) return s;
  for (lane& l : lanes_) {
    cudaStream_t stream = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_error(e, "cudaStreamCreateWithFlags");
    l.stream = stream;
  }
  return {};
}

cuda_copy_engine::~cuda_copy_engine() {
  (void)cudaSetDevice(device_);
  for (lane& l : lanes_) {
    if (l.stream != nullptr) {
      (void)cudaStreamSynchronize(l.stream);
      (void)cudaStreamDestroy(l.stream);
    }
    for (const inflight& f : l.queue) {
      (void)cudaEventDestroy(f.start);
      (void)cudaEventDestroy(f.end);
    }
  }
  for (CUevent_st* ev : spare_events_) (void)cudaEventDestroy(ev);
  for (void* p : device_allocs_) (void)cudaFree(p);
  for (void* p : registered_chunks_) (void)cudaHostUnregister(p);
}

status cuda_copy_engine::register_host(void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return make_error(errc::invalid_argument, "register_host: null base or zero bytes");
  }
  if (status s = set_device(); !s) return s;
  const size_t first_new = registered_chunks_.size();
  for (size_t off = 0; off < bytes; off += k_register_chunk) {
    void* p = static_cast<std::byte*>(base) + off;
    const size_t len = std::min(k_register_chunk, bytes - off);
    const cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
      for (size_t i = first_new; i < registered_chunks_.size(); ++i) {
        (void)cudaHostUnregister(registered_chunks_[i]);
      }
      registered_chunks_.resize(first_new);
      return cuda_error(e, "cudaHostRegister(" + std::to_string(len) + " bytes at offset " +
                               std::to_string(off) + ")");
    }
    registered_chunks_.push_back(p);
  }
  return {};
}

result<device_buffer> cuda_copy_engine::allocate_device(size_t bytes) {
  if (bytes == 0) return make_error(errc::invalid_argument, "allocate_device: zero bytes");
  if (status s = set_device(); !s) return s;
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) return cuda_error(e, "cudaMalloc(" + std::to_string(bytes) + ")");
  device_allocs_.push_back(p);
  return device_buffer{p, bytes};
}

status cuda_copy_engine::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (device_dst == nullptr || host_src == nullptr) {
    return make_error(errc::invalid_argument, "upload: null pointer");
  }
  if (status s = set_device(); !s) return s;
  const cudaError_t e = cudaMemcpy(device_dst, host_src, bytes, cudaMemcpyHostToDevice);
  return e == cudaSuccess ? status{} : cuda_error(e, "upload: cudaMemcpy");
}

status cuda_copy_engine::download(void* host_dst, const void* device_src, size_t bytes) {
  if (host_dst == nullptr || device_src == nullptr) {
    return make_error(errc::invalid_argument, "download: null pointer");
  }
  if (status s = set_device(); !s) return s;
  const cudaError_t e = cudaMemcpy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? status{} : cuda_error(e, "download: cudaMemcpy");
}

result<CUevent_st*> cuda_copy_engine::take_event() {
  if (!spare_events_.empty()) {
    CUevent_st* ev = spare_events_.back();
    spare_events_.pop_back();
    return ev;
  }
  cudaEvent_t ev = nullptr;
  const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDefault);  // timing enabled
  if (e != cudaSuccess) return cuda_error(e, "cudaEventCreate");
  return ev;
}

result<transfer_id> cuda_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                             const submit_options& opts) {
  if (status s = validate_ops(ops); !s) return s;
  if (status s = set_device(); !s) return s;
  lane& l = lane_of(dir);

  auto start = take_event();
  if (!start) return start.error();
  auto end = take_event();
  if (!end) {
    spare_events_.push_back(*start);
    return end.error();
  }
  auto fail = [&](cudaError_t e, std::string_view what) -> status {
    spare_events_.push_back(*start);
    spare_events_.push_back(*end);
    return cuda_error(
        e, std::string("submit ") + std::string(to_string(dir)) + ": " + std::string(what));
  };

  cudaError_t e = cudaSuccess;
  if (opts.wait_event != nullptr) {
    e = cudaStreamWaitEvent(l.stream, static_cast<cudaEvent_t>(opts.wait_event), 0);
    if (e != cudaSuccess) return fail(e, "cudaStreamWaitEvent");
  }
  e = cudaEventRecord(*start, l.stream);
  if (e != cudaSuccess) return fail(e, "cudaEventRecord(start)");

  bool copied = ops.empty();
#if CUDART_VERSION >= 12080
  if (!copied && use_batch_ && ops.size() > 1) {
    std::vector<void*> dsts(ops.size());
    std::vector<size_t> sizes(ops.size());
#if CUDART_VERSION >= 13000
    std::vector<const void*> srcs(ops.size());
#else
    std::vector<void*> srcs(ops.size());
#endif
    for (size_t k = 0; k < ops.size(); ++k) {
      dsts[k] = ops[k].dst;
      srcs[k] = const_cast<void*>(ops[k].src);
      sizes[k] = ops[k].bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_index = 0;
#if CUDART_VERSION >= 13000
    e = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), ops.size(), &attr, &attr_index,
                             1, l.stream);
#else
    size_t fail_index = SIZE_MAX;
    e = cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), ops.size(), &attr, &attr_index,
                             1, &fail_index, l.stream);
#endif
    if (e == cudaSuccess) {
      copied = true;
    } else {
      // A refused batch enqueues nothing; the per-op path below surfaces a real error.
      (void)cudaGetLastError();
      if (e == cudaErrorNotSupported || e == cudaErrorCallRequiresNewerDriver) use_batch_ = false;
    }
  }
#endif
  if (!copied) {
    for (const copy_op& op : ops) {
      e = cudaMemcpyAsync(op.dst, op.src, op.bytes, cudaMemcpyDefault, l.stream);
      if (e != cudaSuccess) return fail(e, "cudaMemcpyAsync");
    }
  }
  e = cudaEventRecord(*end, l.stream);
  if (e != cudaSuccess) return fail(e, "cudaEventRecord(end)");

  const transfer_id id = next_id_++;
  l.queue.push_back(inflight{id, *start, *end, total_bytes(ops)});
  pending_.emplace(id, dir);
  return id;
}

void cuda_copy_engine::harvest(direction dir, transfer_id until) {
  lane& l = lane_of(dir);
  bool blocking = until != 0;
  while (!l.queue.empty()) {
    const inflight f = l.queue.front();
    const cudaError_t e = blocking ? cudaEventSynchronize(f.end) : cudaEventQuery(f.end);
    if (e == cudaErrorNotReady) break;
    transfer_report r;
    r.id = f.id;
    r.dir = dir;
    r.bytes = f.bytes;
    r.ok = e == cudaSuccess;
    if (r.ok) {
      float ms = 0.0f;
      if (cudaEventElapsedTime(&ms, f.start, f.end) == cudaSuccess) r.seconds = ms / 1e3;
    } else {
      r.error = means_no_device(e) ? errc::device_unavailable : errc::device_error;
    }
    finished_state_[f.id] = r.ok ? poll_state::done : poll_state::failed;
    finished_.push_back(r);
    pending_.erase(f.id);
    spare_events_.push_back(f.start);
    spare_events_.push_back(f.end);
    l.queue.pop_front();
    if (f.id == until) blocking = false;
  }
}

poll_state cuda_copy_engine::poll(transfer_id id) {
  if (auto it = finished_state_.find(id); it != finished_state_.end()) return it->second;
  auto it = pending_.find(id);
  if (it == pending_.end()) return poll_state::unknown;
  harvest(it->second);
  auto done = finished_state_.find(id);
  return done == finished_state_.end() ? poll_state::pending : done->second;
}

status cuda_copy_engine::wait(std::span<const transfer_id> ids) {
  std::string unknown;
  for (transfer_id id : ids) {
    if (finished_state_.count(id) != 0) continue;
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    harvest(it->second, id);
  }
  if (!unknown.empty()) {
    return make_error(errc::not_found, "wait: unknown transfer id(s) " + unknown);
  }
  return {};
}

std::vector<transfer_report> cuda_copy_engine::take_finished() {
  harvest(direction::gpu_to_cpu);
  harvest(direction::cpu_to_gpu);
  std::vector<transfer_report> out;
  out.swap(finished_);
  for (const transfer_report& r : out) finished_state_.erase(r.id);
  return out;
}

}  // namespace kvc::cuda
