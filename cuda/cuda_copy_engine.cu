#include "cuda/cuda_copy_engine.hpp"

#include <cuda.h>  // CUcontext and the context calls' types; no link against libcuda
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>
#include <string_view>
#include <thread>

#include <unistd.h>

#include "cuda/device_switch.hpp"
#include "cuda/engine_log.hpp"
#include "cuda/gather_kernel.cuh"
#include "cuda/numa_affinity.hpp"
#include "cuda/op_validator.hpp"
#include "cuda/pin_chunk_plan.hpp"

namespace kvc::cuda {

namespace {

// device_health lists the sticky codes by number; they must be the enum's.
#define KVC_STICKY(e) static_assert(device_health::sticky_name(e) == #e, #e " moved")
KVC_STICKY(cudaErrorECCUncorrectable);
KVC_STICKY(cudaErrorNvlinkUncorrectable);
KVC_STICKY(cudaErrorContained);
KVC_STICKY(cudaErrorIllegalAddress);
KVC_STICKY(cudaErrorLaunchTimeout);
KVC_STICKY(cudaErrorAssert);
KVC_STICKY(cudaErrorHardwareStackError);
KVC_STICKY(cudaErrorIllegalInstruction);
KVC_STICKY(cudaErrorMisalignedAddress);
KVC_STICKY(cudaErrorInvalidAddressSpace);
KVC_STICKY(cudaErrorInvalidPc);
KVC_STICKY(cudaErrorLaunchFailure);
KVC_STICKY(cudaErrorTensorMemoryLeak);
KVC_STICKY(cudaErrorMpsClientTerminated);
KVC_STICKY(cudaErrorExternalDevice);
KVC_STICKY(cudaErrorDevicesUnavailable);
KVC_STICKY(cudaErrorUnknown);
#undef KVC_STICKY
static_assert(sticky_cuda_errors.size() == 17, "a sticky code without its static_assert above");

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

errc errc_of(cudaError_t e) {
  return means_no_device(e) ? errc::device_unavailable : errc::device_error;
}

status cuda_error(cudaError_t e, std::string_view what) {
  return make_error(errc_of(e), "cuda copy engine: " + std::string(what) + ": " + describe(e));
}

/// Runs one CUDA call; when it fails with an error that is not sticky, clears CUDA's last error,
/// which this very call set, so that the host's own cudaGetLastError never reports our failure.
/// cudaErrorNotReady (a state: a query of work still running) can be left as the thread's last
/// error too, and PyTorch's next kernel-launch check in the same thread would raise it: it is
/// cleared when it is the last error.
template <class Fn>
cudaError_t clearing(Fn&& fn) {
  const cudaError_t e = fn();
  if (e == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
  } else if (e != cudaSuccess && !device_health::is_sticky(e)) {
    (void)cudaGetLastError();
  }
  return e;
}

using ctx_get_fn = CUresult (*)(CUcontext*);
using ctx_set_fn = CUresult (*)(CUcontext);
ctx_get_fn get_context(const context_calls& c) { return reinterpret_cast<ctx_get_fn>(c.get); }
ctx_set_fn set_context(const context_calls& c) { return reinterpret_cast<ctx_set_fn>(c.set); }

/// Makes the engine's device current for a scope without creating any other context: see
/// device_switch.hpp for the decision. The caller's context is read and put back with the
/// driver's cuCtxGetCurrent / cuCtxSetCurrent, found through the runtime when the engine is
/// built (the binary does not link libcuda, so it still starts where no driver is installed).
class device_guard {
 public:
  device_guard(const context_calls& calls, int device) : calls_(calls) {
    CUcontext current_context = nullptr;
    const bool had_context = calls_.get != nullptr &&
                             get_context(calls_)(&current_context) == CUDA_SUCCESS &&
                             current_context != nullptr;
    int current_device = -1;
    if (had_context) (void)clearing([&] { return cudaGetDevice(&current_device); });
    const device_switch plan = plan_device_switch(had_context, current_device, device);
    if (plan.set_device) error_ = clearing([&] { return cudaSetDevice(device); });
    if (plan.restore_context && error_ == cudaSuccess) restore_ = current_context;
  }
  ~device_guard() {
    if (restore_ != nullptr) (void)set_context(calls_)(restore_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

  /// cudaSuccess, or why the device could not be made current.
  cudaError_t error() const noexcept { return error_; }

 private:
  const context_calls& calls_;
  CUcontext restore_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};

/// The driver's context calls through the runtime's entry-point query.
cudaError_t find_context_calls(context_calls* out) {
  void* get = nullptr;
  void* set = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t e = clearing([&] {
    return cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault,
                                            &found);
  });
  if (e != cudaSuccess) return e;
  if (found != cudaDriverEntryPointSuccess || get == nullptr) return cudaErrorSymbolNotFound;
  e = clearing([&] {
    return cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault,
                                            &found);
  });
  if (e != cudaSuccess) return e;
  if (found != cudaDriverEntryPointSuccess || set == nullptr) return cudaErrorSymbolNotFound;
  out->get = get;
  out->set = set;
  return cudaSuccess;
}

}  // namespace

result<std::unique_ptr<copy_engine>> cuda_copy_engine::create(const engine_options& opts) {
  int n = 0;  // left unwritten when the call fails
  const cudaError_t e = clearing([&] { return cudaGetDeviceCount(&n); });
  if (e != cudaSuccess) {
    return make_error(errc::device_unavailable,
                      "cuda copy engine: no usable CUDA driver or device: cudaGetDeviceCount "
                      "returned " +
                          describe(e));
  }
  if (n == 0) return make_error(errc::device_unavailable, "cuda copy engine: no CUDA device");
  if (opts.device < 0 || opts.device >= n) {
    return make_error(errc::device_unavailable,
                      "cuda copy engine: device " + std::to_string(opts.device) +
                          " out of range (" + std::to_string(n) + " device(s))");
  }
  std::unique_ptr<cuda_copy_engine> engine(new cuda_copy_engine(opts));
  if (const cudaError_t found = find_context_calls(&engine->context_calls_);
      found != cudaSuccess) {
    return cuda_error(found, "cudaGetDriverEntryPointByVersion(cuCtxGetCurrent/cuCtxSetCurrent)");
  }
  if (status s = engine->init(); !s) return s;
  return std::unique_ptr<copy_engine>(std::move(engine));
}

cuda_copy_engine::cuda_copy_engine(const engine_options& opts)
    : device_(opts.device),
      wait_timeout_(opts.wait_timeout),
      use_batch_(opts.batch_copies),
      pin_chunk_bytes_(opts.pin_chunk_bytes),
      path_(opts.path),
      gather_limits_(opts.gather) {
  health_.set_failure_hook(opts.failure_hook);
  health_.set_error_namer(
      [](int code) { return std::string(cudaGetErrorName(static_cast<cudaError_t>(code))); });
}

#define KVC_CALL(name, expr) \
  static_cast<cudaError_t>(health_.call(name, [&] { return clearing([&] { return expr; }); }))

status cuda_copy_engine::init() {
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  std::array<char, 64> bus_id{};
  if (KVC_CALL("cudaDeviceGetPCIBusId",
               cudaDeviceGetPCIBusId(bus_id.data(), static_cast<int>(bus_id.size()), device_)) ==
      cudaSuccess) {
    auto node = read_pci_numa_node(bus_id.data());
    if (node) numa_node_ = *node;
    if (!node) engine_log::numa_unknown(device_, node.error().message());
  }
  for (lane& l : lanes_) {
    cudaStream_t stream = nullptr;
    const cudaError_t e = KVC_CALL("cudaStreamCreateWithFlags",
                                   cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    if (e != cudaSuccess) return cuda_error(e, "cudaStreamCreateWithFlags");
    l.stream = stream;
  }
  return init_gather();
}

status cuda_copy_engine::init_gather() {
  if (path_ == copy_path::memcpy) return {};
  if (gather_limits_.max_ops == 0 || gather_limits_.max_ops > UINT32_MAX) {
    return make_error(errc::invalid_argument,
                      "cuda copy engine: gather max_ops must be in [1, 2^32)");
  }
  int host_pointers = 0;
  cudaError_t e = KVC_CALL("cudaDeviceGetAttribute",
                           cudaDeviceGetAttribute(&host_pointers,
                                                  cudaDevAttrCanUseHostPointerForRegisteredMem,
                                                  device_));
  if (e != cudaSuccess) return cuda_error(e, "cudaDeviceGetAttribute");
  if (host_pointers == 0) {
    if (path_ == copy_path::auto_select) return {};  // memcpy only
    return make_error(errc::invalid_argument,
                      "cuda copy engine: copy path kernel: device " + std::to_string(device_) +
                          " cannot use host pointers of registered memory "
                          "(cudaDevAttrCanUseHostPointerForRegisteredMem is 0)");
  }
  if (gather_limits_.chunk_bytes == 0) {
    return make_error(errc::invalid_argument, "cuda copy engine: gather chunk_bytes must be > 0");
  }
  // Load the kernel's module now, not at its first launch inside a submit (lazy loading may
  // synchronise the context and stall the step behind the forward pass).
  e = KVC_CALL("cudaFuncGetAttributes", load_gather());
  if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
    if (path_ == copy_path::auto_select) return {};  // memcpy only
    return cuda_error(e, "copy path kernel: the gather kernel cannot run on device " +
                             std::to_string(device_));
  }
  if (e != cudaSuccess) return cuda_error(e, "cudaFuncGetAttributes(gather kernel)");
  const size_t ring_bytes = ring_slots * gather_limits_.max_ops * sizeof(gather_desc);
  for (lane& l : lanes_) {
    void* host = nullptr;
    e = KVC_CALL("cudaHostAlloc",
                 cudaHostAlloc(&host, ring_bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    if (e != cudaSuccess) return cuda_error(e, "cudaHostAlloc(descriptor ring)");
    l.ring.host = static_cast<gather_desc*>(host);
    void* device = nullptr;
    e = KVC_CALL("cudaHostGetDevicePointer", cudaHostGetDevicePointer(&device, host, 0));
    if (e != cudaSuccess) return cuda_error(e, "cudaHostGetDevicePointer(descriptor ring)");
    l.ring.device = static_cast<gather_desc*>(device);
    l.ring.busy.assign(ring_slots, false);
  }
  gather_ready_ = true;
  return {};
}

cuda_copy_engine::~cuda_copy_engine() {
  device_guard g(context_calls_, device_);
  // Bounded: a lane waiting on a compute event that never comes (a hung kernel) must not keep
  // the worker from exiting and being restarted.
  const auto deadline = std::chrono::steady_clock::now() + wait_timeout_;
  bool drained = true;
  for (lane& l : lanes_) {
    if (l.stream != nullptr && !health_.latched()) drained = sync_lane(l, deadline).ok() && drained;
  }
  if (!drained) {
    // Copies may still touch the streams' events, the device memory and the pinned chunks:
    // nothing is freed, and the process's exit takes them.
    engine_log::shutdown_timed_out(device_, wait_timeout_.count());
    return;
  }
  for (lane& l : lanes_) {
    if (l.stream != nullptr) (void)clearing([&] { return cudaStreamDestroy(l.stream); });
    for (const inflight& f : l.queue) {
      (void)clearing([&] { return cudaEventDestroy(f.start); });
      (void)clearing([&] { return cudaEventDestroy(f.end); });
    }
    if (l.ring.host != nullptr) (void)clearing([&] { return cudaFreeHost(l.ring.host); });
  }
  for (CUevent_st* ev : spare_events_) (void)clearing([&] { return cudaEventDestroy(ev); });
  for (void* p : device_allocs_) (void)clearing([&] { return cudaFree(p); });
  for (void* p : registered_chunks_) (void)clearing([&] { return cudaHostUnregister(p); });
}

status cuda_copy_engine::sync_lane(lane& l, std::chrono::steady_clock::time_point deadline) {
  uint32_t idle_polls = 0;
  for (;;) {
    const cudaError_t e = KVC_CALL("cudaStreamQuery", cudaStreamQuery(l.stream));
    if (e == cudaSuccess) return {};
    if (e != cudaErrorNotReady) return cuda_error(e, "cudaStreamQuery");
    if (std::chrono::steady_clock::now() >= deadline) {
      return make_error(errc::timeout, "cuda copy engine: a stream still had work after " +
                                           std::to_string(wait_timeout_.count()) + " ms");
    }
    // Poll instead of cudaStreamSynchronize, which has no deadline.
    if (++idle_polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

status cuda_copy_engine::register_host(void* base, size_t bytes, size_t slot_stride) {
  if (base == nullptr || bytes == 0) {
    return make_error(errc::invalid_argument, "register_host: null base or zero bytes");
  }
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto plan =
      plan_pin_chunks(bytes, slot_stride == 0 ? bytes : slot_stride, pin_chunk_bytes_, page);
  if (!plan) return make_error(plan.code(), "register_host: " + plan.error().message());
  if (plan->size() > 1 && reinterpret_cast<uintptr_t>(base) % page != 0) {
    return make_error(errc::invalid_argument,
                      "register_host: a region pinned in several chunks must start on a page "
                      "boundary (two chunks sharing a page cannot both be registered)");
  }
  if (host_ranges_.overlaps(base, bytes)) {
    return make_error(errc::invalid_argument,
                      "register_host: range overlaps a range already registered");
  }
  if (status s = health_.admit(); !s) return s;
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  const size_t first_new = registered_chunks_.size();
  // Pinning is synchronous and takes seconds per tens of GB: say so, and how far it got.
  const bool large = bytes >= pin_log_bytes;
  const auto began = std::chrono::steady_clock::now();
  if (large) {
    engine_log::pinning_started(device_, bytes, plan->size());
  }
  for (const pin_chunk& c : *plan) {
    void* p = static_cast<std::byte*>(base) + c.offset;
    // Mapped as well when the gather kernel reads the pool through its host addresses.
    const unsigned flags =
        cudaHostRegisterPortable | (gather_ready_ ? cudaHostRegisterMapped : 0u);
    const cudaError_t e = KVC_CALL("cudaHostRegister", cudaHostRegister(p, c.bytes, flags));
    if (e != cudaSuccess) {
      for (size_t i = first_new; i < registered_chunks_.size(); ++i) {
        (void)clearing([&] { return cudaHostUnregister(registered_chunks_[i]); });
        host_ranges_.erase(reinterpret_cast<uintptr_t>(registered_chunks_[i]));
      }
      registered_chunks_.resize(first_new);
      return cuda_error(e, "cudaHostRegister(" + std::to_string(c.bytes) + " bytes at offset " +
                               std::to_string(c.offset) + ")");
    }
    registered_chunks_.push_back(p);
    (void)host_ranges_.insert(reinterpret_cast<uintptr_t>(p), c.bytes);  // disjoint: checked
    if (large && plan->size() > 1) {
      engine_log::pinning_progress(device_, c.offset + c.bytes, bytes);
    }
  }
  if (large) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    engine_log::pinning_done(device_, bytes, seconds);
  }
  return {};
}

status cuda_copy_engine::register_device(const void* base, size_t bytes) {
  if (base == nullptr || bytes == 0 || reinterpret_cast<uintptr_t>(base) > UINTPTR_MAX - bytes) {
    return make_error(errc::invalid_argument,
                      "register_device: null base, zero bytes or a wrapping range");
  }
  if (device_ranges_.contains(base, bytes)) return {};  // inside an allocation of ours
  if (device_ranges_.overlaps(base, bytes)) {
    return make_error(errc::invalid_argument,
                      "register_device: range overlaps device memory already registered");
  }
  if (status s = health_.admit(); !s) return s;
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  const auto* first = static_cast<const std::byte*>(base);
  for (const void* p :
       {static_cast<const void*>(first), static_cast<const void*>(first + bytes - 1)}) {
    cudaPointerAttributes attr{};
    const cudaError_t e = KVC_CALL("cudaPointerGetAttributes", cudaPointerGetAttributes(&attr, p));
    if (e == cudaErrorInvalidValue) {
      return make_error(errc::invalid_argument,
                        "register_device: CUDA does not know the pointer (cudaErrorInvalidValue)");
    }
    if (e != cudaSuccess) return cuda_error(e, "register_device: cudaPointerGetAttributes");
    if (attr.type != cudaMemoryTypeDevice || attr.device != device_) {
      return make_error(errc::invalid_argument,
                        "register_device: range is not device memory of device " +
                            std::to_string(device_) + " (memory type " +
                            std::to_string(static_cast<int>(attr.type)) + ", device " +
                            std::to_string(attr.device) + ")");
    }
  }
  return device_ranges_.insert(reinterpret_cast<uintptr_t>(base), bytes);
}

result<device_buffer> cuda_copy_engine::allocate_device(size_t bytes) {
  if (bytes == 0) return make_error(errc::invalid_argument, "allocate_device: zero bytes");
  if (status s = health_.admit(); !s) return s;
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  void* p = nullptr;
  const cudaError_t e = KVC_CALL("cudaMalloc", cudaMalloc(&p, bytes));
  if (e != cudaSuccess) return cuda_error(e, "cudaMalloc(" + std::to_string(bytes) + ")");
  device_allocs_.push_back(p);
  if (status s = device_ranges_.insert(reinterpret_cast<uintptr_t>(p), bytes); !s) {
    return make_error(errc::internal, "allocate_device: " + s.message());
  }
  return device_buffer{p, bytes};
}

status cuda_copy_engine::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (device_dst == nullptr || host_src == nullptr) {
    return make_error(errc::invalid_argument, "upload: null pointer");
  }
  return copy_now(direction::cpu_to_gpu, device_dst, host_src, bytes, "upload");
}

status cuda_copy_engine::download(void* host_dst, const void* device_src, size_t bytes) {
  if (host_dst == nullptr || device_src == nullptr) {
    return make_error(errc::invalid_argument, "download: null pointer");
  }
  return copy_now(direction::gpu_to_cpu, host_dst, device_src, bytes, "download");
}

status cuda_copy_engine::copy_now(direction dir, void* dst, const void* src, size_t bytes,
                                  std::string_view what) {
  if (status s = health_.admit(); !s) return s;
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  // On the direction's own stream, then waited for: ordered after the transfers queued there
  // and finished before any later one. A cudaMemcpy on the legacy stream is neither (from
  // pageable memory it may return while its DMA still runs).
  lane& l = lane_of(dir);
  const cudaMemcpyKind kind =
      dir == direction::gpu_to_cpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
  const cudaError_t e =
      KVC_CALL("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, kind, l.stream));
  if (e != cudaSuccess) return cuda_error(e, std::string(what) + ": cudaMemcpyAsync");
  if (status s = sync_lane(l, std::chrono::steady_clock::now() + wait_timeout_); !s) {
    return make_error(s.code(), std::string(what) + ": " + s.message());
  }
  return {};
}

result<CUevent_st*> cuda_copy_engine::take_event() {
  if (!spare_events_.empty()) {
    CUevent_st* ev = spare_events_.back();
    spare_events_.pop_back();
    return ev;
  }
  cudaEvent_t ev = nullptr;
  const cudaError_t e =  // timing enabled
      KVC_CALL("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&ev, cudaEventDefault));
  if (e != cudaSuccess) return cuda_error(e, "cudaEventCreate");
  return ev;
}

result<transfer_id> cuda_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                             const submit_options& opts) {
  if (status s = health_.admit(); !s) return s;
  if (status s = check_ordering(opts); !s) return s;
  if (status s = checker_.validate(ops); !s) return s;
  if (status s = check_placement(dir, ops, host_ranges_, device_ranges_); !s) return s;
  device_guard g(context_calls_, device_);
  if (g.error() != cudaSuccess) return cuda_error(g.error(), "cudaSetDevice");
  lane& l = lane_of(dir);

  auto start = take_event();
  if (!start) return start.error();
  auto end = take_event();
  if (!end) {
    spare_events_.push_back(*start);
    return end.error();
  }
  // Refuses the submit; only valid while no copy of it is queued.
  auto refuse = [&](cudaError_t e, std::string_view what) -> status {
    spare_events_.push_back(*start);
    spare_events_.push_back(*end);
    return cuda_error(
        e, std::string("submit ") + std::string(to_string(dir)) + ": " + std::string(what));
  };

  cudaError_t e = cudaSuccess;
  if (opts.wait_event != nullptr) {
    e = KVC_CALL("cudaStreamWaitEvent",
                 cudaStreamWaitEvent(l.stream, static_cast<cudaEvent_t>(opts.wait_event), 0));
    if (e != cudaSuccess) return refuse(e, "cudaStreamWaitEvent");
  }
  e = KVC_CALL("cudaEventRecord", cudaEventRecord(*start, l.stream));
  if (e != cudaSuccess) return refuse(e, "cudaEventRecord(start)");

  bool copied = ops.empty();
  int ring_slot = -1;
  if (!copied && gather_ready_ && takes_gather(path_, ops, gather_limits_)) {
    int launch_error = cudaSuccess;
    ring_slot = try_gather(l, ops, &launch_error);
    copied = ring_slot >= 0;
    const auto le = static_cast<cudaError_t>(launch_error);
    if (device_health::is_sticky(le)) return refuse(le, "gather kernel launch");
    if (le == cudaErrorNoKernelImageForDevice || le == cudaErrorInvalidDeviceFunction) {
      gather_ready_ = false;  // not built for this device: memcpy from now on
    }
    if (!copied) ++kernel_fallbacks_;
  }
#if CUDART_VERSION >= 12080
  if (!copied && use_batch_ && ops.size() > 1) {
    batch_dsts_.resize(ops.size());
    batch_srcs_.resize(ops.size());
    batch_sizes_.resize(ops.size());
    for (size_t k = 0; k < ops.size(); ++k) {
      batch_dsts_[k] = ops[k].dst;
      batch_srcs_[k] = ops[k].src;
      batch_sizes_[k] = ops[k].bytes;
    }
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    // Hints only matter for managed memory; they say the direction all the same.
    const cudaMemLocation gpu_loc{cudaMemLocationTypeDevice, device_};
    const cudaMemLocation cpu_loc{cudaMemLocationTypeHost, 0};
    attr.srcLocHint = dir == direction::gpu_to_cpu ? gpu_loc : cpu_loc;
    attr.dstLocHint = dir == direction::gpu_to_cpu ? cpu_loc : gpu_loc;
    size_t attr_index = 0;
#if CUDART_VERSION >= 13000
    e = KVC_CALL("cudaMemcpyBatchAsync",
                 cudaMemcpyBatchAsync(batch_dsts_.data(), batch_srcs_.data(), batch_sizes_.data(),
                                      ops.size(), &attr, &attr_index, 1, l.stream));
#else
    size_t fail_index = SIZE_MAX;
    e = KVC_CALL(
        "cudaMemcpyBatchAsync",
        cudaMemcpyBatchAsync(batch_dsts_.data(), const_cast<void**>(batch_srcs_.data()),
                             batch_sizes_.data(), ops.size(), &attr, &attr_index, 1, &fail_index,
                             l.stream));
#endif
    if (e == cudaSuccess) {
      copied = true;
      ++batched_;
    } else if (device_health::is_sticky(e)) {
      return refuse(e, "cudaMemcpyBatchAsync");  // the device is gone: nothing will run
    } else {
      // A refused batch enqueues nothing; the per-op path below copies this transfer. Whatever
      // the reason, batching is off from now on: retrying would pay a failed call per submit.
      use_batch_ = false;
      batch_refusal_ = health_.failure_text("cudaMemcpyBatchAsync", e);
      engine_log::batch_refused(device_, batch_refusal_);
    }
  }
#endif
  size_t queued = 0;
  cudaError_t copy_error = cudaSuccess;
  if (!copied) {
    const cudaMemcpyKind kind =
        dir == direction::gpu_to_cpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
    for (const copy_op& op : ops) {
      copy_error =
          KVC_CALL("cudaMemcpyAsync", cudaMemcpyAsync(op.dst, op.src, op.bytes, kind, l.stream));
      if (copy_error != cudaSuccess) break;
      ++queued;
    }
    if (copy_error == cudaSuccess) ++per_op_;
    if (copy_error != cudaSuccess && queued == 0) return refuse(copy_error, "cudaMemcpyAsync");
  }
  e = KVC_CALL("cudaEventRecord", cudaEventRecord(*end, l.stream));
  if (e != cudaSuccess) {
    if (!copied && queued == 0) return refuse(e, "cudaEventRecord(end)");
    // Copies are queued and no event marks their end: wait for the stream before refusing, so
    // that the caller may reuse the memory. A sticky error means nothing runs any more.
    if (!device_health::is_sticky(e)) {
      (void)KVC_CALL("cudaStreamSynchronize", cudaStreamSynchronize(l.stream));
    }
    if (ring_slot >= 0) l.ring.busy[ring_slot] = false;  // its kernel ran (or never will)
    return refuse(e, "cudaEventRecord(end) after queuing copies");
  }

  const transfer_id id = next_id_++;
  inflight f{id, *start, *end, total_bytes(ops), errc::ok, {}, ring_slot};
  if (copy_error != cudaSuccess) {
    f.failed = errc_of(copy_error);
    f.detail = health_.failure_text("cudaMemcpyAsync", copy_error);
  }
  l.queue.push_back(std::move(f));
  pending_.emplace(id, dir);
  return id;
}

int cuda_copy_engine::try_gather(lane& l, std::span<const copy_op> ops, int* error) {
  *error = cudaSuccess;
  auto free_slot = [&] {
    for (int s = 0; s < ring_slots; ++s) {
      if (!l.ring.busy[s]) return s;
    }
    return -1;
  };
  int slot = free_slot();
  if (slot < 0) {
    // Every slot was taken: give back those whose transfers completed meanwhile (a query of the
    // lane's oldest end events; nothing blocks), then look again.
    (void)harvest(direction_of(l));
    slot = free_slot();
  }
  if (slot < 0) return -1;  // every slot is read by a kernel in flight
  const size_t base = static_cast<size_t>(slot) * gather_limits_.max_ops;
  const size_t descs = fill_gather_descs(ops, {l.ring.host + base, gather_limits_.max_ops},
                                         gather_limits_.chunk_bytes);
  std::atomic_thread_fence(std::memory_order_release);  // descriptors written before the launch
  const cudaError_t e =
      KVC_CALL("cudaLaunchKernel",
               launch_gather(l.ring.device + base, static_cast<uint32_t>(descs), l.stream));
  if (e != cudaSuccess) {
    *error = e;
    return -1;
  }
  l.ring.busy[slot] = true;
  ++kernel_;
  return slot;
}

status cuda_copy_engine::harvest(direction dir, transfer_id until,
                                 std::chrono::steady_clock::time_point deadline) {
  lane& l = lane_of(dir);
  bool blocking = until != 0;
  uint32_t idle_polls = 0;
  while (!l.queue.empty()) {
    const inflight& f = l.queue.front();
    const cudaError_t e = KVC_CALL("cudaEventQuery", cudaEventQuery(f.end));
    if (e == cudaErrorNotReady) {
      if (!blocking) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        return make_error(errc::timeout, "wait: transfer " + std::to_string(until) +
                                             " not finished after " +
                                             std::to_string(wait_timeout_.count()) + " ms");
      }
      // Poll the event instead of blocking in cudaEventSynchronize, which has no deadline.
      if (++idle_polls > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    idle_polls = 0;
    transfer_report r;
    r.id = f.id;
    r.dir = dir;
    r.bytes = f.bytes;
    r.ok = e == cudaSuccess && f.failed == errc::ok;
    if (r.ok) {
      float ms = 0.0f;
      if (KVC_CALL("cudaEventElapsedTime", cudaEventElapsedTime(&ms, f.start, f.end)) ==
          cudaSuccess) {
        r.seconds = ms / 1e3;
      }
    } else {
      r.error = f.failed != errc::ok ? f.failed : errc_of(e);
      // A latched device names the call that killed it; else the event's own error.
      r.detail = f.failed != errc::ok ? f.detail
                 : health_.latched()  ? health_.admit().message()
                                      : health_.failure_text("cudaEventQuery", e);
    }
    finished_state_[f.id] = r.ok ? poll_state::done : poll_state::failed;
    finished_.push_back(r);
    pending_.erase(f.id);
    spare_events_.push_back(f.start);
    spare_events_.push_back(f.end);
    // The end event completed (or the device failed): its kernel reads the slot no more.
    if (f.ring_slot >= 0) l.ring.busy[f.ring_slot] = false;
    const transfer_id done_id = f.id;
    l.queue.pop_front();  // `f` dangles from here
    if (done_id == until) blocking = false;
  }
  return {};
}

#undef KVC_CALL

poll_state cuda_copy_engine::poll(transfer_id id) {
  if (auto it = finished_state_.find(id); it != finished_state_.end()) return it->second;
  auto it = pending_.find(id);
  if (it == pending_.end()) return poll_state::unknown;
  device_guard g(context_calls_, device_);
  (void)harvest(it->second);
  auto done = finished_state_.find(id);
  return done == finished_state_.end() ? poll_state::pending : done->second;
}

status cuda_copy_engine::wait(std::span<const transfer_id> ids) {
  device_guard g(context_calls_, device_);
  const auto deadline = std::chrono::steady_clock::now() + wait_timeout_;
  std::string unknown;
  for (transfer_id id : ids) {
    if (finished_state_.count(id) != 0) continue;
    auto it = pending_.find(id);
    if (it == pending_.end()) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    if (status s = harvest(it->second, id, deadline); !s) return s;
  }
  if (!unknown.empty()) {
    return make_error(errc::not_found, "wait: unknown transfer id(s) " + unknown);
  }
  return {};
}

std::vector<transfer_report> cuda_copy_engine::take_finished() {
  device_guard g(context_calls_, device_);
  (void)harvest(direction::gpu_to_cpu);
  (void)harvest(direction::cpu_to_gpu);
  std::vector<transfer_report> out;
  out.swap(finished_);
  for (const transfer_report& r : out) finished_state_.erase(r.id);
  return out;
}

}  // namespace kvc::cuda
