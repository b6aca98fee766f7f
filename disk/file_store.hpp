#pragma once
/// file_store: one rank's block files of the file tier, read and written synchronously. The
/// asynchronous side (threads, queues) is file_io; the decisions (which block, when) are the
/// scheduler's file_tier_ledger.
///
/// Layout under `root_dir`:
///   <run digest>/config.txt               the run description, written on first start
///   <run digest>/<rank>/<hh>/<key>.kvb    one block (disk/block_file.hpp), hh = its first 2 hex
///                                         digits (256 shards, each made at its first write)
/// Directories are 0700, files 0600 (proto/private_files.hpp). A run whose description differs
/// from the config record in its directory is refused (errc::layout_mismatch), so a different
/// model or geometry never reads another's files; a different one has another digest anyway.
///
/// Writes go to `<key>.kvb.tmp.<pid>.<n>` and are renamed into place once complete, so the final
/// name never holds a torn file; temp files a crash left behind are removed at open. A removed
/// file is renamed to such a temp name and kept (up to `recycled_files` of them) for a later
/// write to overwrite in full before its rename: the same guarantees, without allocating. No fsync:
/// after a power loss a renamed file may hold anything, and the checksum refuses it (a miss).
/// Reads verify the header, the size and the checksum; a file refused is removed and reported as
/// errc::layout_mismatch, a missing one as errc::not_found, I/O errors (EIO, ENOSPC, EROFS) as
/// errc::io_error naming the file and the reason.
///
/// O_DIRECT is used where the file system takes it (probed at open); otherwise buffered I/O, with
/// the reason in direct_io_note() (ramfs refuses O_DIRECT). Each I/O goes in three steps:
/// begin_* (checks, opens the file, lays out the bytes in a block_transfer), the transfer (an I/O
/// engine: blocking, or io_uring; disk/file_io.hpp) and finish() (close, rename or verify);
/// write/read/check do all three on the calling thread with its own scratch slot. Thread-safe:
/// calls for different keys may run concurrently (the ledger never has two I/Os of one key in
/// flight).
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "disk/block_file.hpp"
#include "disk/block_transfer.hpp"
#include "proto/block_key.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::disk {

/// Removed block files a store keeps for recycling, at most (file_store_options).
inline constexpr uint32_t default_recycled_files = 32;

/// How a tier's `capacity_bytes` is shared between the blocks (the scheduler's ledger evicts
/// beyond `ledger_bytes`) and the recycled files a store keeps (`recycled_files`), so that the
/// files on disk never take more than capacity_bytes: at most `max_recycled` recycled files and
/// at most an eighth of the block files the capacity holds (none below 8).
struct capacity_split {
  uint64_t ledger_bytes = 0;
  uint32_t recycled_files = 0;
};
capacity_split split_capacity(uint64_t capacity_bytes, uint64_t block_file_bytes,
                              uint32_t max_recycled = default_recycled_files) noexcept;

struct file_store_options {
  std::string root_dir;
  /// What identifies the run's KV: model, dtype, KV geometry, block size, topology (any text;
  /// the same text is the same run).
  std::string run_description;
  rank_id rank = 0;
  uint64_t payload_bytes = 0;  ///< bytes of one block's KV on this rank
  bool direct_io = true;       ///< try O_DIRECT
  /// Removed block files kept (under temp names) for the next writes to overwrite, at most:
  /// overwriting a file whose blocks are allocated skips the file system's allocation and
  /// freeing, which is what makes a fresh file per block slower than a plain overwrite. 0: off.
  /// A tier takes them out of its capacity_bytes (split_capacity).
  uint32_t recycled_files = default_recycled_files;
};

class file_store {
 public:
  /// Creates the directories (0700), writes or checks the config record, removes temp files and
  /// lists the blocks already there. errc::io_error when root_dir cannot be used (missing parent
  /// permissions, read-only, a file in the way), errc::layout_mismatch when the config record
  /// holds another description, errc::invalid_argument for a payload of 0 bytes.
  static result<std::unique_ptr<file_store>> open(const file_store_options& options);
  /// Removes the recycled files kept.
  ~file_store();

  /// Writes the block's file (temp name, then rename). payload.size() must be payload_bytes.
  status write(const block_key& key, std::span<const char> payload);
  /// Reads and verifies the block's file into `into` (payload_bytes long). On a refusal the file
  /// is removed; `into` may then hold anything.
  status read(const block_key& key, std::span<char> into);
  /// Whether the block's file is there with a valid header and size (a lookup's check; the
  /// payload's checksum is verified by read). A refused file is removed.
  status check(const block_key& key);
  /// Removes the block's file (keeping it for recycling while fewer than recycled_files are
  /// kept); a missing file is fine.
  status remove(const block_key& key);

  /// The steps of write/read/check for an I/O engine. A begin_* that fails leaves nothing open
  /// (and has removed a refused file); one that succeeds must be followed by finish(), after the
  /// transfer of `t` ended. `slot` holds the transfer's scratch memory until finish() returns;
  /// `payload` and `into` stay valid as long (a page-aligned one is written from / read into
  /// directly).
  /// With `defer_create`, a write that finds no recycled file leaves its temp file to be made
  /// by the engine (t.stage == transfer_stage::create, t.fd -1; see created()).
  status begin_write(const block_key& key, std::span<const char> payload, io_slot& slot,
                     block_transfer& t, bool defer_create = false);
  status begin_read(const block_key& key, std::span<char> into, io_slot& slot,
                    block_transfer& t);
  status begin_check(const block_key& key, io_slot& slot, block_transfer& t);
  /// Closes the file and completes the I/O: a write is renamed into place (its temp file removed
  /// on any failure), a read or check verified (a refused file removed). Returns the I/O's
  /// outcome.
  status finish(block_transfer& t);

  /// An engine's own create and rename (io_uring's openat / renameat), the same steps as the
  /// blocking ones. created(): `res` is the create's new fd or -errno; ENOENT (the shard
  /// directory not made yet) makes the directory and sets `again` (create once more); any other
  /// error is the write's failure (nothing to remove). On success t.stage is `move`.
  status created(block_transfer& t, int res, bool& again);
  /// Makes a deferred write's temp file on the calling thread (open(2) and created()).
  status create(block_transfer& t);
  /// Closes a complete write's file before an engine renames it (t.stage becomes `rename`); on
  /// a failure (an earlier I/O error, or close's) the temp file is removed and the error
  /// returned, and the write is over.
  status close_for_rename(block_transfer& t);
  /// renamed(): `res` is the rename's 0 or -errno; ENOENT (a recycled file going into a shard
  /// not made yet) makes the directory and sets `again`; any other error removes the temp file.
  status renamed(block_transfer& t, int res, bool& again);

  /// Blocks found at open, least recently written first.
  const std::vector<block_key>& found_at_open() const noexcept { return found_; }
  bool direct_io() const noexcept { return direct_; }
  /// Why O_DIRECT is not used (empty when it is).
  const std::string& direct_io_note() const noexcept { return direct_note_; }
  uint64_t payload_bytes() const noexcept { return id_.payload_bytes; }
  /// Bytes of one block's file (what capacity_bytes counts).
  uint64_t block_file_bytes() const noexcept { return file_bytes(id_.payload_bytes); }
  const run_digest& digest() const noexcept { return id_.run; }
  const std::string& rank_dir() const noexcept { return rank_dir_; }
  std::string path_of(const block_key& key) const;

 private:
  file_store(const file_store_options& options, std::string rank_dir);
  status prepare();
  status scan();
  int open_flags(int base) const noexcept;
  /// Opens a recycled file for a write, its name becoming t.temp; -1 when none is kept (or it
  /// failed).
  int open_recycled(block_transfer& t);
  /// A temp name next to `path`.
  static std::string temp_name(const std::string& path);
  /// Opens the block's file for reading into t.fd, with its size in t.file_size; a file of the
  /// wrong size is refused. errc::not_found when it is missing.
  status open_for_read(const block_key& key, block_transfer& t) const;
  status finish_write(block_transfer& t);
  status finish_read(block_transfer& t);
  status finish_check(block_transfer& t);
  /// Removes a refused file and returns `why`.
  status refuse(const std::string& path, status why) const;

  std::string root_dir_;
  std::string run_description_;
  std::string run_dir_;
  std::string rank_dir_;
  block_file_id id_;
  bool want_direct_;
  bool direct_ = false;
  std::string direct_note_;
  std::vector<block_key> found_;
  uint32_t max_recycled_;
  std::mutex recycled_mu_;
  std::vector<std::string> recycled_;  ///< temp names of removed files, for writes to reuse
};

}  // namespace kvc::disk
