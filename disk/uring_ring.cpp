#include "disk/uring_ring.hpp"

#include <liburing.h>

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
  const int rc = ::io_uring_queue_init(depth, ring.get(), 0);
  if (rc < 0) return make_error(errc::device_unavailable, "file tier: " + refusal(-rc));
  return std::unique_ptr<uring_ring>{new uring_ring(std::move(ring), depth)};
}

uring_ring::uring_ring(std::unique_ptr<::io_uring> ring, uint32_t depth)
    : ring_(std::move(ring)), depth_(depth) {}

uring_ring::~uring_ring() {
  ::io_uring_queue_exit(ring_.get());
}

void uring_ring::queue(block_transfer& t) {
  // The caller keeps at most depth() in flight, so a free entry is always there.
  io_uring_sqe* sqe = ::io_uring_get_sqe(ring_.get());
  if (sqe == nullptr) {  // never with depth() in flight at most; sending frees the entries
    ::io_uring_submit(ring_.get());
    sqe = ::io_uring_get_sqe(ring_.get());
  }
  if (t.op == transfer_op::write) {
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

status uring_ring::reap(bool wait, const std::function<void(block_transfer&, int)>& done) {
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
    done(*static_cast<block_transfer*>(::io_uring_cqe_get_data(cqe)), cqe->res);
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
