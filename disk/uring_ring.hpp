#pragma once
/// uring_ring: one io_uring (liburing) of a fixed depth moving block_transfers: a write's create
/// (openat), its bytes (readv/writev at the transfer's offset) and its rename (renameat),
/// completions handed back with the transfer they belong to. The
/// caller (disk::file_io's ring threads) keeps at most depth() transfers in flight and owns them
/// until their completion comes back. Not thread-safe: one thread drives one ring.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "disk/block_transfer.hpp"
#include "proto/status.hpp"

struct io_uring;
struct io_uring_sqe;

namespace kvc::disk {

class uring_ring {
 public:
  /// A ring of `depth` entries. errc::device_unavailable with the reason when the kernel refuses
  /// io_uring (ENOSYS: not built in; EPERM: a seccomp filter, as in many containers, or
  /// kernel.io_uring_disabled; ENOMEM: locked-memory limit), errc::invalid_argument for depth 0.
  static result<std::unique_ptr<uring_ring>> create(uint32_t depth);
  ~uring_ring();
  uring_ring(const uring_ring&) = delete;
  uring_ring& operator=(const uring_ring&) = delete;

  /// Block transfers in flight at most (the ring has one entry more, for the wake-up poll).
  uint32_t depth() const noexcept { return depth_; }
  /// The ring's wake-up: an eventfd that another thread writes (wake()) to end the ring thread's
  /// wait in reap() when new work arrives. arm_wake() queues a one-shot poll of it (sent by the
  /// next flush()); its completion comes back to reap() with no transfer, and the ring thread
  /// arms it again.
  int wake_fd() const noexcept { return wake_fd_; }
  void arm_wake();
  static void wake(int fd) noexcept;
  /// Whether the kernel runs file operations in the ring (IORING_OP_OPENAT and
  /// IORING_OP_RENAMEAT, Linux 5.11; probed at create). Without them a transfer is only ever
  /// queued at stage `move`.
  bool file_ops() const noexcept { return file_ops_; }
  /// Queues `t`'s current stage, sent by the next flush(): `create` an openat of t.temp
  /// (t.create_flags, 0600; the new fd is the completion's res), `move` the next piece of its
  /// bytes (whatever is left, from t.done), `rename` a renameat of t.temp to t.path. The kernel
  /// runs an openat that must create, and a renameat, on its own workers (io-wq), off the
  /// ring's thread.
  void queue(block_transfer& t);
  /// Sends what was queued. An error here is the ring's (not one transfer's): the queued
  /// transfers stay unsent.
  status flush();
  /// Waits until at least one completion is there (when `wait`; otherwise takes only what is
  /// there) and calls `done(t, res)` for each: t the transfer (nullptr for the poll), res >= 0
  /// bytes moved, < 0 an -errno.
  status reap(bool wait, const std::function<void(block_transfer* t, int res)>& done);

 private:
  uring_ring(std::unique_ptr<::io_uring> ring, uint32_t depth, int wake_fd, bool file_ops);
  ::io_uring_sqe* next_sqe();
  std::unique_ptr<::io_uring> ring_;
  uint32_t depth_;
  int wake_fd_;
  bool file_ops_;
};

/// Why io_uring cannot be used here (empty when it can): a ring of one entry is made and closed.
std::string io_uring_unavailable_reason();

}  // namespace kvc::disk
