#pragma once
/// block_transfer: one block file's data transfer, prepared by file_store (file open, the bytes
/// laid out as up to three page-aligned pieces) and carried out by an I/O engine: blocking
/// (preadv/pwritev, disk::transfer_blocking) or through io_uring (disk/uring_ring.hpp). The
/// engine only moves bytes and calls advance(); file_store::finish() does the rest (close,
/// rename or verify). Each I/O in flight owns one io_slot (its aligned scratch memory).
///
/// Zero copy where the caller's memory allows it: a payload whose start is page-aligned is
/// written from and read into the caller's memory directly (the pool's slots are); only its last
/// partial page goes through the slot. Other memory is staged in the slot whole. Not thread-safe:
/// one engine thread owns a transfer from begin to finish.
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "proto/block_key.hpp"
#include "proto/status.hpp"

namespace kvc::disk {

/// Page-aligned scratch memory of one I/O in flight, grown as needed, never shrunk.
class io_slot {
 public:
  /// `bytes` of page-aligned memory (the previous contents are lost when it grows); empty when
  /// the allocation failed.
  std::span<char> get(size_t bytes);

 private:
  struct freer {
    void operator()(char* p) const noexcept;
  };
  std::unique_ptr<char, freer> mem_;
  size_t size_ = 0;
};

enum class transfer_op : uint8_t { write, read, check };

/// Where a transfer stands. A write whose temp file is still to be made starts at `create`
/// (begin_write with the create deferred: an engine makes it, off its thread where it can);
/// every other transfer starts at `move`. A complete write goes to `rename` once its file is
/// closed (file_store::close_for_rename), when its engine renames asynchronously.
enum class transfer_stage : uint8_t { create, move, rename };

struct block_transfer {
  transfer_op op = transfer_op::write;
  transfer_stage stage = transfer_stage::move;
  block_key key;
  int fd = -1;
  int create_flags = 0;     ///< open(2) flags making `temp` (stage create)
  bool shard_made = false;  ///< the shard directory was made for this write (retried once)
  std::string path;         ///< the block's file
  std::string temp;         ///< a write's temp name (renamed to path by finish)
  /// What is left to move, from file offset `done`: the first `count` of `pieces`.
  std::array<iovec, 3> pieces{};
  int count = 0;
  uint64_t done = 0;      ///< bytes moved so far (the file offset of the next byte)
  uint64_t expected = 0;  ///< bytes asked for in all
  bool at_end = false;    ///< a read met the end of the file
  status outcome;         ///< the transfer's I/O error, set by the engine

  // What finish() needs, set by file_store's begin_*:
  std::span<char> into;      ///< a read's destination (payload_bytes)
  std::span<char> scratch;   ///< the slot's memory this transfer uses
  bool direct_into = false;  ///< a read lands in `into` (page-aligned) rather than in scratch
  uint64_t file_size = 0;    ///< a check: the file's size at open

  /// Whether bytes are left to move.
  bool pending() const noexcept { return outcome.ok() && !at_end && done < expected; }
  /// Records `n` bytes moved; 0 on a read is the end of the file.
  void advance(uint64_t n) noexcept;
};

/// Records the transfer's I/O error `err` (an errno) on `t`: errc::io_error naming the file.
void fail_transfer(block_transfer& t, int err);

/// Moves every byte of `t` with preadv/pwritev (short transfers continue, EINTR retries); sets
/// t.outcome on an error.
void transfer_blocking(block_transfer& t);

}  // namespace kvc::disk
