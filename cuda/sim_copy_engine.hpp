#pragma once
/// sim_copy_engine: the always-built copy_engine backend. Host memory allocated by the engine
/// stands in for GPU memory; one copy thread per direction runs transfers in submission order, so
/// completion is FIFO per direction while stores and loads overlap, as on two CUDA streams.
///
/// Device memory, upload/download and the op checks are sim_device_memory's (shared with the
/// manual backend): ops whose GPU side is not inside one buffer from allocate_device (or one
/// adopted by register_device), or whose CPU side points into one, are refused at submit.
///
/// Test hook: pause(dir) closes a gate the copy thread checks before it starts the next
/// transfer of that direction, so a test can observe `pending` without timing; resume(dir)
/// opens it. wait() on a transfer queued behind a closed gate fails with
/// errc::precondition_failed instead of blocking forever.
///
/// Ownership: owns its device buffers and its two threads. The destructor lets a transfer that is
/// being copied finish and drops the queued ones. Thread-safety: one owner thread calls the
/// public methods (pause/resume included); the copy threads share state under one mutex.
/// upload/download are not ordered against in-flight transfers (like cudaMemcpy against a
/// non-blocking stream): wait first.
#include <array>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/sim_device_memory.hpp"

namespace kvc::cuda {

class sim_copy_engine final : public host_memory_engine {
 public:
  sim_copy_engine();
  ~sim_copy_engine() override;
  sim_copy_engine(const sim_copy_engine&) = delete;
  sim_copy_engine& operator=(const sim_copy_engine&) = delete;

  std::string_view name() const noexcept override { return "sim"; }

  result<transfer_id> submit(direction dir, std::span<const copy_op> ops,
                             const submit_options& opts = {}) override;
  poll_state poll(transfer_id id) override;
  status wait(std::span<const transfer_id> ids) override;
  std::vector<transfer_report> take_finished() override;

  /// Test hook: no transfer of `dir` starts until resume(dir). A transfer already being copied
  /// finishes.
  void pause(direction dir);
  void resume(direction dir);

 private:
  struct job {
    transfer_id id = 0;
    std::vector<copy_op> ops;
    uint64_t bytes = 0;
  };
  struct lane {
    std::deque<job> queue;
    bool paused = false;
    std::condition_variable work_cv;
    std::thread thread;
  };
  struct state {
    direction dir = direction::gpu_to_cpu;
    poll_state st = poll_state::pending;
  };

  void run_lane(direction dir);
  lane& lane_of(direction d) { return lanes_[static_cast<size_t>(d)]; }

  // Owner-thread state (copy threads never read it), besides memory_.
  transfer_id next_id_ = 1;

  // Shared with the copy threads.
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool stopping_ = false;
  std::array<lane, 2> lanes_;
  std::unordered_map<transfer_id, state> states_;  ///< submitted, not yet taken
  std::vector<transfer_report> finished_;          ///< completion order, not yet taken
};

}  // namespace kvc::cuda
