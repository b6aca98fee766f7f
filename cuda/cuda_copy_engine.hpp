#pragma once
/// cuda_copy_engine: the CUDA backend. One non-blocking stream per direction, so completion is
/// FIFO per direction and stores overlap loads. Each transfer records a start and an end event
/// on its stream (timing and completion); poll() queries the end events without blocking. A
/// transfer's ops go out as one cudaMemcpyBatchAsync (CUDA >= 12.8; the driver may refuse it,
/// then per-op cudaMemcpyAsync is used from then on). A transfer may first wait on an event
/// of the compute stream (submit_options::wait_event, a cudaEvent_t).
///
/// Every CUDA error is returned as errc::device_unavailable (no driver / device) or
/// errc::device_error, with the CUDA error name and string. A copy that fails on the device
/// (sticky error) makes its transfer and those after it report failed.
///
/// Ownership: owns its streams, events and device allocations, and unregisters the host ranges
/// it registered; the destructor first synchronises both streams. Thread-safety: one owner
/// thread; it makes the engine's device current before each CUDA call that needs it.
/// upload/download use cudaMemcpy, which does not synchronise with the non-blocking streams.
/// This header needs no CUDA header: handles are the opaque CUDA driver structs.
#include <array>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/copy_engine.hpp"

struct CUstream_st;
struct CUevent_st;

namespace kvc::cuda {

class cuda_copy_engine final : public copy_engine {
 public:
  /// errc::device_unavailable when the driver is missing, no device exists or `device` is out of
  /// range; errc::device_error when streams cannot be created.
  static result<std::unique_ptr<copy_engine>> create(int device);
  ~cuda_copy_engine() override;
  cuda_copy_engine(const cuda_copy_engine&) = delete;
  cuda_copy_engine& operator=(const cuda_copy_engine&) = delete;

  std::string_view name() const noexcept override { return "cuda"; }
  /// cudaHostRegister(cudaHostRegisterPortable) in chunks of at most 64 GiB; on failure the
  /// chunks registered by this call are unregistered again.
  status register_host(void* base, size_t bytes) override;
  result<device_buffer> allocate_device(size_t bytes) override;
  status upload(void* device_dst, const void* host_src, size_t bytes) override;
  status download(void* host_dst, const void* device_src, size_t bytes) override;

  result<transfer_id> submit(direction dir, std::span<const copy_op> ops,
                             const submit_options& opts = {}) override;
  poll_state poll(transfer_id id) override;
  status wait(std::span<const transfer_id> ids) override;
  std::vector<transfer_report> take_finished() override;

 private:
  explicit cuda_copy_engine(int device);

  struct inflight {
    transfer_id id = 0;
    CUevent_st* start = nullptr;
    CUevent_st* end = nullptr;
    uint64_t bytes = 0;
  };
  struct lane {
    CUstream_st* stream = nullptr;
    std::deque<inflight> queue;  ///< submission order
  };

  status init();
  status set_device();
  result<CUevent_st*> take_event();
  /// Moves the finished head of the lane's queue to finished_ (FIFO). With `until` != 0 it
  /// blocks on each end event up to and including that transfer's.
  void harvest(direction dir, transfer_id until = 0);
  lane& lane_of(direction d) { return lanes_[static_cast<size_t>(d)]; }

  int device_ = 0;
  bool use_batch_ = true;
  std::array<lane, 2> lanes_;
  std::vector<CUevent_st*> spare_events_;
  std::vector<void*> device_allocs_;
  std::vector<void*> registered_chunks_;
  std::unordered_map<transfer_id, direction> pending_;
  std::unordered_map<transfer_id, poll_state> finished_state_;
  std::vector<transfer_report> finished_;
  transfer_id next_id_ = 1;
};

}  // namespace kvc::cuda
