#pragma once
/// manual_copy_engine: a deterministic copy_engine backend with no threads and no clock. Host
/// memory stands in for GPU memory (sim_device_memory, the same checks as the sim backend), and a
/// transfer completes only when its owner makes it: advance(dir, n) completes the next n queued
/// transfers of a direction, advance_all() everything, and wait(ids) completes the listed
/// transfers itself (with every earlier one of their direction, FIFO), since nobody else ever
/// would. Bytes are copied at completion, not at submit, as a DMA reads its source when it runs:
/// a test can change the source after submit and see the change arrive.
///
/// For tests and soaks that need to choose the order of completions. A real run that only polls
/// would never see a transfer finish: something must advance or wait. Reports carry seconds = 0.
/// submit_options::wait_event is ignored, as in the sim.
///
/// Ownership: owns its device buffers and the queued op lists; the destructor drops queued
/// transfers without copying. Not thread-safe: one owner thread calls every method.
#include <array>
#include <deque>
#include <unordered_map>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/sim_device_memory.hpp"

namespace kvc::cuda {

class manual_copy_engine final : public host_memory_engine {
 public:
  std::string_view name() const noexcept override { return "manual"; }

  /// Checks the ops like the sim and queues the transfer; copies nothing yet.
  result<transfer_id> submit(direction dir, std::span<const copy_op> ops,
                             const submit_options& opts = {}) override;
  poll_state poll(transfer_id id) override;
  /// Completes each listed queued transfer and every one queued before it in its direction.
  status wait(std::span<const transfer_id> ids) override;
  std::vector<transfer_report> take_finished() override;

  /// Completes up to `n` of the oldest queued transfers of `dir`; returns how many it completed.
  size_t advance(direction dir, size_t n = 1);
  /// Completes every queued transfer (stores first, then loads); returns how many.
  size_t advance_all();
  /// Transfers of `dir` submitted and not yet completed.
  size_t pending(direction dir) const noexcept;

 private:
  struct job {
    transfer_id id = 0;
    std::vector<copy_op> ops;
    uint64_t bytes = 0;
  };

  /// Copies the head transfer of `dir` and moves it to the finished list.
  void complete_head(direction dir);
  std::deque<job>& queue_of(direction d) { return queues_[static_cast<size_t>(d)]; }

  std::array<std::deque<job>, 2> queues_;  ///< per direction, submission order
  std::unordered_map<transfer_id, direction> queued_;
  std::unordered_map<transfer_id, poll_state> finished_state_;  ///< finished, not yet taken
  std::vector<transfer_report> finished_;                       ///< completion order
  transfer_id next_id_ = 1;
};

}  // namespace kvc::cuda
