#include "disk/block_transfer.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "disk/block_file.hpp"

namespace kvc::disk {

void io_slot::freer::operator()(char* p) const noexcept {
  std::free(p);
}

std::span<char> io_slot::get(size_t bytes) {
  if (size_ < bytes) {
    const size_t rounded = (bytes + page_bytes - 1) / page_bytes * page_bytes;
    mem_.reset(static_cast<char*>(std::aligned_alloc(page_bytes, rounded)));
    size_ = mem_ ? rounded : 0;
  }
  if (!mem_) return {};
  return {mem_.get(), bytes};
}

void block_transfer::advance(uint64_t n) noexcept {
  if (n == 0) {
    if (op == transfer_op::write) {
      fail_transfer(*this, EIO);  // a write that moves nothing would never end
    } else {
      at_end = true;
    }
    return;
  }
  done += n;
  int first = 0;
  while (first < count && n >= pieces[first].iov_len) {
    n -= pieces[first].iov_len;
    ++first;
  }
  if (first < count) {
    pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + n;
    pieces[first].iov_len -= n;
  }
  for (int i = first; i < count; ++i) pieces[i - first] = pieces[i];
  count -= first;
}

void fail_transfer(block_transfer& t, int err) {
  const bool writing = t.op == transfer_op::write;
  t.outcome = make_error(errc::io_error,
                         std::string{"file tier: cannot "} + (writing ? "write " : "read ") +
                             (writing ? t.temp : t.path) + ": " + std::strerror(err));
}

void transfer_blocking(block_transfer& t) {
  while (t.pending()) {
    const auto offset = static_cast<off_t>(t.done);
    const ssize_t n = t.op == transfer_op::write ? ::pwritev(t.fd, t.pieces.data(), t.count, offset)
                                                 : ::preadv(t.fd, t.pieces.data(), t.count, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      fail_transfer(t, errno);
      return;
    }
    t.advance(static_cast<uint64_t>(n));
  }
}

}  // namespace kvc::disk
