#pragma once
/// tier_io: the block I/O a worker::tier_executor drives, the calls of disk::file_io it needs
/// (worker::file_tier_io forwards them to one). A seam in leveldb's EnvWrapper manner: a test wraps
/// or replaces it to hold a request queued or running until the test says so, and keeps the
/// executor itself real.
///
/// Contract (disk::file_io's): submits return at once; every submitted request completes once,
/// with its ticket, unless cancel() withdrew it first; take_completions never blocks;
/// wait_completions blocks until at least one completion is there. The memory of a read or a
/// write stays valid and untouched until its completion is taken or it is cancelled.
#include <cstdint>
#include <span>
#include <vector>

#include "disk/file_io.hpp"
#include "proto/block_key.hpp"

namespace kvc::worker {

class tier_io {
 public:
  virtual ~tier_io() = default;

  virtual void submit_write(uint64_t ticket, const block_key& key,
                            std::span<const char> payload) = 0;
  virtual void submit_read(uint64_t ticket, const block_key& key, std::span<char> into) = 0;
  virtual void submit_check(uint64_t ticket, const block_key& key) = 0;
  virtual void submit_remove(uint64_t ticket, const block_key& key) = 0;
  /// Withdraws the requests among `tickets` that have not started; returns their tickets (they
  /// never complete). A running one is left to complete.
  virtual std::vector<uint64_t> cancel(std::span<const uint64_t> tickets) = 0;
  virtual std::vector<disk::io_completion> take_completions() = 0;
  virtual std::vector<disk::io_completion> wait_completions() = 0;
};

}  // namespace kvc::worker
