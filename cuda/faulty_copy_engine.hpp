#pragma once
/// faulty_copy_engine: a copy_engine decorator (leveldb EnvWrapper style) that injects the
/// faults of a fault_plan into any engine. register_host, register_device, allocate_device, upload
/// and download are forwarded unchanged; submit, poll, wait and take_finished apply the injector's
/// decision:
///   fail_at_submit      submit returns errc::injected_fault; the target never sees the ops.
///   fail_at_completion  the copy runs on the target, but the report says failed
///                       (errc::injected_fault).
///   delay               the transfer stays pending after the target finished it, until
///                       `release_after` more transfers were accepted, release() is called, or
///                       it is waited on (a blocking wait must not hang on a fault that only the
///                       owner's next submit could release). Completion stays FIFO per
///                       direction: transfers behind a held one are held too.
///   lose_device         the device is lost as after a sticky CUDA error: the transfer goes to
///                       the target (its copies run), but it and every transfer not yet
///                       reported report failed (errc::device_unavailable, the fault in the
///                       detail), every later submit answers device_unavailable without
///                       reaching the target, and health() says so.
/// Every submit call is one transfer for the injector's ordinals; only accepted ones (those that
/// got an id) count for release_after. With an empty plan it behaves exactly like its target.
///
/// Ownership: owns the target engine and is the only one taking its reports. Thread-safety: one
/// owner thread, like every copy_engine.
#include <array>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/fault_injector.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::cuda {

class faulty_copy_engine final : public copy_engine {
 public:
  /// errc::invalid_argument for a null target or an invalid plan.
  static result<std::unique_ptr<faulty_copy_engine>> make(std::unique_ptr<copy_engine> target,
                                                          fault_plan plan);

  /// "faulty(<target>)".
  std::string_view name() const noexcept override { return name_; }
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
  uint64_t batched_transfers() const noexcept override { return target_->batched_transfers(); }
  uint64_t kernel_transfers() const noexcept override { return target_->kernel_transfers(); }
  status health() const override;

  /// The wrapped engine (tests use it to drive the target, e.g. the sim's pause hook).
  copy_engine& target() noexcept { return *target_; }
  const fault_injector& injector() const noexcept { return injector_; }

  /// Releases a delayed transfer; false when `id` is not a held delayed transfer.
  bool release(transfer_id id);
  /// Releases every delayed transfer; returns how many were held.
  size_t release_all();
  /// Delayed transfers not yet released.
  size_t held() const;

 private:
  faulty_copy_engine(std::unique_ptr<copy_engine> target, fault_injector injector);

  struct entry {
    direction dir = direction::gpu_to_cpu;
    fault_action action = fault_action::none;
    uint64_t release_at = 0;  ///< accepted_ count that releases a delay; 0 = never by count
    bool released = false;
    std::optional<transfer_report> report;  ///< the target's report, once finished
  };

  bool is_held(const entry& e) const;
  /// Pulls the target's reports and moves the finished, unheld head of each direction to ready_.
  void pump();

  std::unique_ptr<copy_engine> target_;
  fault_injector injector_;
  std::string name_;
  uint64_t accepted_ = 0;
  std::string lost_;  ///< the lose_device fault that fired; "" while the device is usable
  std::unordered_map<transfer_id, entry> entries_;  ///< submitted, not yet ready
  std::array<std::deque<transfer_id>, 2> order_;    ///< per direction, submission order
  std::vector<transfer_report> ready_;              ///< finished, not yet taken
  std::unordered_map<transfer_id, poll_state> ready_state_;
};

}  // namespace kvc::cuda
