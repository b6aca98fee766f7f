#pragma once
/// cuda_copy_engine: the CUDA backend. One non-blocking stream per direction, so completion is
/// FIFO per direction and stores overlap loads. Each transfer records a start and an end event
/// on its stream (timing and completion); poll() queries the end events without blocking, wait()
/// polls them up to engine_options::wait_timeout. A transfer's ops go out as one
/// cudaMemcpyBatchAsync (CUDA >= 12.8; when the driver refuses one, for whatever reason, batching
/// is off from then on, logged once with the reason (batch_refusal()), and per-op
/// cudaMemcpyAsync with an explicit kind, DeviceToHost or HostToDevice, copies; never
/// cudaMemcpyDefault). The gather kernel's module is loaded when the engine is built, never at
/// a first launch inside a submit.
///
/// Checks before any CUDA call, all host-side (op_validator, address_range_set):
///   - ordering: a submit carries a wait_event (a cudaEvent_t of the compute stream) or states
///     no_dependency; else errc::invalid_argument;
///   - placement: the GPU side of each op lies in one range from allocate_device or
///     register_device (checked once there with cudaPointerGetAttributes), the CPU side in one
///     chunk pinned by register_host; swapped sides are named.
///
/// Errors: every CUDA error is returned as errc::device_unavailable (no driver / device) or
/// errc::device_error, with the CUDA error name and string. A sticky error (device_health)
/// latches: every later submit answers errc::device_unavailable without calling CUDA, and
/// transfers in flight report failed; the codes a GPU lost from the bus answers
/// (cudaErrorDevicesUnavailable, cudaErrorUnknown) latch too. CUDA's last error is cleared only
/// after a call of this engine failed or left cudaErrorNotReady behind (so the host's own error
/// checks never see ours), never before. A device call
/// failing after copies of a transfer were queued leaves the transfer pending until those copies
/// finished; it then reports failed.
///
/// Ownership: owns its streams, events and device allocations, and unregisters the host chunks
/// it registered; the destructor first waits for both streams, at most wait_timeout: past it,
/// it logs and frees nothing (copies may still touch that memory; the process's exit takes it).
/// Thread-safety: one owner thread. Each public method makes the engine's device current for its
/// calls and puts the caller's context back, never creating a context the caller did not have
/// (device_switch.hpp). upload/download copy on the direction's stream and wait for it, so they
/// are ordered after the transfers queued in that direction and finished before later ones. This
/// header needs no CUDA header: handles are the opaque CUDA driver structs.
#include <array>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/address_range_set.hpp"
#include "cuda/copy_engine.hpp"
#include "cuda/device_health.hpp"
#include "cuda/engine_factory.hpp"
#include "cuda/gather_plan.hpp"
#include "cuda/op_validator.hpp"

struct CUstream_st;
struct CUevent_st;

namespace kvc::cuda {

/// The driver's current-context calls (cuCtxGetCurrent, cuCtxSetCurrent), found through the
/// runtime when an engine is built; the .cu file gives them their types.
struct context_calls {
  void* get = nullptr;
  void* set = nullptr;
};

class cuda_copy_engine final : public copy_engine {
 public:
  /// errc::device_unavailable when the driver is missing, no device exists or `opts.device` is
  /// out of range; errc::device_error when streams cannot be created.
  static result<std::unique_ptr<copy_engine>> create(const engine_options& opts);
  ~cuda_copy_engine() override;
  cuda_copy_engine(const cuda_copy_engine&) = delete;
  cuda_copy_engine& operator=(const cuda_copy_engine&) = delete;

  std::string_view name() const noexcept override { return "cuda"; }
  /// cudaHostRegister(cudaHostRegisterPortable) per pin_chunk_plan chunk (whole slots, at most
  /// engine_options::pin_chunk_bytes, 64 GiB by default); on failure the chunks registered by
  /// this call are unregistered again.
  status register_host(void* base, size_t bytes, size_t slot_stride = 0) override;
  status register_device(const void* base, size_t bytes) override;
  result<device_buffer> allocate_device(size_t bytes) override;
  status upload(void* device_dst, const void* host_src, size_t bytes) override;
  status download(void* host_dst, const void* device_src, size_t bytes) override;

  result<transfer_id> submit(direction dir, std::span<const copy_op> ops,
                             const submit_options& opts = {}) override;
  poll_state poll(transfer_id id) override;
  status wait(std::span<const transfer_id> ids) override;
  std::vector<transfer_report> take_finished() override;

  /// Transfers whose ops went out as one cudaMemcpyBatchAsync / as per-op cudaMemcpyAsync.
  uint64_t batched_transfers() const noexcept override { return batched_; }
  uint64_t per_op_transfers() const noexcept { return per_op_; }
  /// Transfers the gather kernel copied (engine_options::path).
  uint64_t kernel_transfers() const noexcept override { return kernel_; }
  /// Transfers the path gave the kernel that went by memcpy: every ring slot was still read by
  /// a kernel in flight, or the launch failed.
  uint64_t kernel_fallbacks() const noexcept override { return kernel_fallbacks_; }
  /// Why the driver refused cudaMemcpyBatchAsync ("" while batching is on or was never tried).
  const std::string& batch_refusal() const noexcept { return batch_refusal_; }
  /// The NUMA node of the device's PCIe root (sysfs), -1 when unknown.
  int numa_node() const override { return numa_node_; }
  /// Gather-kernel transfers one direction may have in flight; more are copied with memcpy.
  static constexpr int ring_slots = 32;
  /// device_unavailable once a sticky error latched (device_health::admit).
  status health() const override { return health_.admit(); }

 private:
  explicit cuda_copy_engine(const engine_options& opts);

  struct inflight {
    transfer_id id = 0;
    CUevent_st* start = nullptr;
    CUevent_st* end = nullptr;
    uint64_t bytes = 0;
    errc failed = errc::ok;  ///< set when a call failed after copies were queued
    std::string detail;      ///< that call and its CUDA error name, when failed
    int ring_slot = -1;      ///< the descriptor slot its gather kernel reads, -1: none
  };
  /// The gather kernel's descriptors of one lane: `slots` x gather_limits::max_ops, in mapped
  /// pinned host memory. A slot is taken at submit and given back when its transfer's end event
  /// completed, never while the kernel may still read it.
  struct descriptor_ring {
    gather_desc* host = nullptr;    ///< cudaHostAlloc(cudaHostAllocMapped)
    gather_desc* device = nullptr;  ///< the same memory as the kernel addresses it
    std::vector<bool> busy;
  };
  struct lane {
    CUstream_st* stream = nullptr;
    std::deque<inflight> queue;  ///< submission order
    descriptor_ring ring;
  };


  status init();
  /// upload/download: one copy on the direction's stream, then waits for that stream.
  status copy_now(direction dir, void* dst, const void* src, size_t bytes, std::string_view what);
  /// Waits (polling, no cudaStreamSynchronize) until `l`'s stream is idle or `deadline` passed
  /// (errc::timeout).
  status sync_lane(lane& l, std::chrono::steady_clock::time_point deadline);
  /// Decides whether the gather kernel can run (init) and allocates the lanes' rings.
  status init_gather();
  /// Copies `ops` with one gather kernel launch from a free ring slot: the slot, -1 when no slot
  /// is free or the launch failed without a sticky error (*error says which; the caller copies
  /// with memcpy then).
  int try_gather(lane& l, std::span<const copy_op> ops, int* error);
  result<CUevent_st*> take_event();
  /// Moves the finished head of the lane's queue to finished_ (FIFO). With `until` != 0 it
  /// polls until that transfer finished or `deadline` passed (errc::timeout).
  status harvest(direction dir, transfer_id until = 0,
                 std::chrono::steady_clock::time_point deadline = {});
  lane& lane_of(direction d) { return lanes_[static_cast<size_t>(d)]; }
  direction direction_of(const lane& l) const {
    return &l == &lanes_[0] ? direction::gpu_to_cpu : direction::cpu_to_gpu;
  }
  /// register_host logs its progress for regions at least this large.
  static constexpr size_t pin_log_bytes = size_t{1} << 30;

  int device_ = 0;
  int numa_node_ = -1;
  context_calls context_calls_;
  op_checker checker_;
  std::string batch_refusal_;
  uint64_t kernel_fallbacks_ = 0;
  std::chrono::milliseconds wait_timeout_;
  device_health health_;
  bool use_batch_ = true;  ///< engine_options::batch_copies, off once the driver refused a batch
  size_t pin_chunk_bytes_;
  copy_path path_;
  gather_limits gather_limits_;
  bool gather_ready_ = false;  ///< path_ != memcpy and the device can run the kernel
  uint64_t kernel_ = 0;
  uint64_t batched_ = 0;
  uint64_t per_op_ = 0;
  std::array<lane, 2> lanes_;
  std::vector<CUevent_st*> spare_events_;
  std::vector<void*> device_allocs_;
  std::vector<void*> registered_chunks_;
  address_range_set host_ranges_;    ///< pinned chunks
  address_range_set device_ranges_;  ///< allocated or registered device memory
  std::vector<void*> batch_dsts_;    ///< scratch of submit, reused
  std::vector<const void*> batch_srcs_;
  std::vector<size_t> batch_sizes_;
  std::unordered_map<transfer_id, direction> pending_;
  std::unordered_map<transfer_id, poll_state> finished_state_;
  std::vector<transfer_report> finished_;
  transfer_id next_id_ = 1;
};

}  // namespace kvc::cuda
