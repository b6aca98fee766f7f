#include "disk/uring_ring.hpp"

#include <liburing.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvc::disk {

namespace {

std::string refusal(int err) {
  std::string why = std::string{"io_uring_queue_init: "} + std::strerror(err);
  if (err == ENOSYS) why += " (the kernel has no io_uring)";
  if (err == EPERM) why += " (refused by a seccomp filter or kernel.io_uring_disabled)";
  if (err == ENOMEM) why += " (locked-memory limit, ulimit -l)";
  return why;
}

}  // namespace

result<std::unique_ptr<uring_ring>> uring_ring::create(uint32_t depth) {
  if (depth == 0) return make_error(errc::invalid_argument, "file tier: an io_uring of depth 0");
  auto ring = std::make_unique<::io_uring>();
  const int wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    return make_error(errc::io_error, std::string{"file tier: eventfd: "} + std::strerror(errno));
  }
  // One entry more than the transfers in flight: the wake-up poll.
  const int rc = ::io_uring_queue_init(depth + 1, ring.get(), 0);
  if (rc < 0) {
    ::close(wake_fd);
    return make_error(errc::device_unavailable, "file tier: " + refusal(-rc));
  }
  bool file_ops = false;
  if (io_uring_probe* probe = ::io_uring_get_probe_ring(ring.get()); probe != nullptr) {
    file_ops = ::io_uring_opcode_supported(probe, IORING_OP_OPENAT) != 0 &&
               ::io_uring_opcode_supported(probe, IORING_OP_RENAMEAT) != 0;
    ::io_uring_free_probe(probe);
  }
  return std::unique_ptr<uring_ring>{new uring_ring(std::move(ring), depth, wake_fd, file_ops)};
}

uring_ring::uring_ring(std::unique_ptr<::io_uring> ring, uint32_t depth, int wake_fd, bool file_ops)
    : ring_(std::move(ring)), depth_(depth), wake_fd_(wake_fd), file_ops_(file_ops) {}

uring_ring::~uring_ring() {
  ::io_uring_queue_exit(ring_.get());
  ::close(wake_fd_);
}

::io_uring_sqe* uring_ring::next_sqe() {
  // The caller keeps at most depth() transfers and one poll in flight, so an entry is free once
  // what was queued is sent.
  io_uring_sqe* sqe = ::io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {
    ::io_uring_submit(ring_.get());
    sqe = ::io_uring_get_sqe(ring_.get());
  }
  return sqe;
}

void uring_ring::arm_wake() {
  uint64_t count = 0;
  while (::read(wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }  // cleared (EAGAIN when it was not set)
  io_uring_sqe* sqe = next_sqe();
  ::io_uring_prep_poll_add(sqe, wake_fd_, POLLIN);
  ::io_uring_sqe_set_data(sqe, nullptr);
}

void uring_ring::wake(int fd) noexcept {
  const uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }  // EAGAIN: the counter is full, so the ring is woken anyway
}

void uring_ring::queue(block_transfer& t) {
  io_uring_sqe* sqe = next_sqe();
  if (t.stage == transfer_stage::create) {
    ::io_uring_prep_openat(sqe, AT_FDCWD, t.temp.c_str(), t.create_flags, 0600);
  } else if (t.stage == transfer_stage::rename) {
    ::io_uring_prep_renameat(sqe, AT_FDCWD, t.temp.c_str(), AT_FDCWD, t.path.c_str(), 0);
  } else if (t.op == transfer_op::write) {
    ::io_uring_prep_writev(sqe, t.fd, t.pieces.data(), static_cast<unsigned>(t.count), t.done);
  } else {
    ::io_uring_prep_readv(sqe, t.fd, t.pieces.data(), static_cast<unsigned>(t.count), t.done);
  }
  ::io_uring_sqe_set_data(sqe, &t);
}

status uring_ring::flush() {
  for (;;) {
    const int rc = ::io_uring_submit(ring_.get());
    if (rc >= 0) return status::success();
    if (rc == -EINTR) continue;
    return make_error(errc::io_error,
                      std::string{"file tier: io_uring_submit: "} + std::strerror(-rc));
  }
}

status uring_ring::reap(bool wait, const std::function<void(block_transfer*, int)>& done) {
  io_uring_cqe* cqe = nullptr;
  if (wait) {
    int rc = 0;
    do {
      rc = ::io_uring_wait_cqe(ring_.get(), &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
      return make_error(errc::io_error,
                        std::string{"file tier: io_uring_wait_cqe: "} + std::strerror(-rc));
    }
  }
  unsigned head = 0;
  unsigned seen = 0;
  io_uring_for_each_cqe(ring_.get(), head, cqe) {
    done(static_cast<block_transfer*>(::io_uring_cqe_get_data(cqe)), cqe->res);
    ++seen;
  }
  ::io_uring_cq_advance(ring_.get(), seen);
  return status::success();
}

std::string io_uring_unavailable_reason() {
  ::io_uring ring{};
  const int rc = ::io_uring_queue_init(1, &ring, 0);
  if (rc < 0) return refusal(-rc);
  ::io_uring_queue_exit(&ring);
  return {};
}

}  // namespace kvc::disk
