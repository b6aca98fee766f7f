#pragma once
/// file_io: the file tier's asynchronous I/O over one file_store: reads (promotions) and checks
/// (lookups) in one FIFO queue, writes (cascades) and removals in another, so that a burst of
/// cascades never delays a promotion. Submits return at once; completions are collected with
/// take_completions() (never blocks) or wait_completions() (blocks until at least one is there:
/// benchmarks and tests).
///
/// Two engines move the bytes, chosen at create (file_io_options::engine):
/// - io_uring: each of the direction's n threads drives its own ring (liburing) and keeps up to
///   `io_depth` block I/Os of its queue in flight, submitted in batches (readv/writev of the
///   file's pieces; O_DIRECT where the store uses it). A write's fresh temp file is made and a
///   complete write renamed into place by openat / renameat in the ring where the kernel has
///   them (the kernel's workers do both); other opening, closing and verifying run on the ring's
///   thread between submissions.
/// - threads: each of the direction's n threads does one block I/O at a time (preadv/pwritev).
/// `automatic` takes io_uring when the kernel allows it (probed at create) and falls back to
/// threads otherwise, with the reason in engine_note() (ENOSYS, or EPERM from a container's
/// seccomp filter). Both engines go through the same file_store steps (temp name + rename,
/// header and checksum verified on read), so crash safety does not depend on the engine.
///
/// The caller keeps the memory of a submitted read or write valid and untouched until its
/// completion is taken (the scheduler's ledger pins the pool slot). A page-aligned buffer is
/// written from and read into directly. The destructor finishes the queued work, then joins the
/// threads. Thread-safe.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "disk/file_store.hpp"
#include "proto/block_key.hpp"
#include "proto/status.hpp"

namespace kvc::disk {

enum class io_kind : uint8_t { write, read, check, remove };

/// Which engine moves the bytes (config: offload.secondary_tiers[].io_engine).
enum class io_engine : uint8_t { automatic, io_uring, threads };

/// "auto", "io_uring", "threads".
std::string_view name_of(io_engine e) noexcept;
/// The engine named `name`, or std::nullopt.
std::optional<io_engine> io_engine_named(std::string_view name) noexcept;

struct file_io_options {
  uint32_t n_read_threads = 16;   ///< threads (io_uring: rings) of the read queue
  uint32_t n_write_threads = 16;  ///< threads (io_uring: rings) of the write queue
  io_engine engine = io_engine::automatic;
  uint32_t io_depth = 4;  ///< io_uring: block I/Os in flight per ring
};

struct io_completion {
  uint64_t ticket = 0;  ///< the caller's number for the request
  io_kind kind = io_kind::write;
  block_key key;
  status outcome;
  uint64_t bytes = 0;  ///< KV bytes moved (0 for a check, a removal or a failure)
};

class file_io {
 public:
  /// errc::invalid_argument when a thread count or io_depth is 0; errc::device_unavailable with
  /// the reason when io_uring is asked for and the kernel refuses it.
  static result<std::unique_ptr<file_io>> create(std::unique_ptr<file_store> store,
                                                 const file_io_options& options);
  /// The automatic engine with these thread counts.
  static result<std::unique_ptr<file_io>> create(std::unique_ptr<file_store> store,
                                                 uint32_t n_read_threads, uint32_t n_write_threads);
  ~file_io();
  file_io(const file_io&) = delete;
  file_io& operator=(const file_io&) = delete;

  void submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload);
  void submit_read(uint64_t ticket, const block_key& key, std::span<char> into);
  void submit_check(uint64_t ticket, const block_key& key);
  void submit_remove(uint64_t ticket, const block_key& key);
  /// Withdraws the requests among `tickets` that are still queued (no thread has taken them);
  /// returns their tickets, which never complete. The others (running, done, unknown) are left
  /// as they are: a running one completes as usual. Never blocks on I/O.
  std::vector<uint64_t> cancel(std::span<const uint64_t> tickets);

  /// The completions so far, in the order they finished; never blocks.
  std::vector<io_completion> take_completions();
  /// Blocks until at least one completion is there, then takes them all.
  std::vector<io_completion> wait_completions();

  file_store& store() noexcept { return *store_; }
  /// The engine in use: io_engine::io_uring or io_engine::threads.
  io_engine engine() const noexcept { return engine_; }
  /// Why the threads engine is in use (empty with io_uring): by configuration, or io_uring's
  /// refusal.
  const std::string& engine_note() const noexcept { return engine_note_; }

 private:
  /// A request waiting in its queue. A write's payload is only read (the span is const there).
  struct request {
    uint64_t ticket = 0;
    io_kind kind = io_kind::write;
    block_key key;
    std::span<char> buffer;
  };
  struct queue {
    std::deque<request> jobs;
    std::condition_variable ready;
    std::vector<int> waiting_rings;  ///< wake-up fds of rings waiting in the kernel
  };
  class ring_loop;

  explicit file_io(std::unique_ptr<file_store> store);
  void start_threads(queue& q, uint32_t threads);
  void submit(queue& q, request r);
  /// The next requests of `q`, at most `most`; waits for one when `wait`. Empty once stopping
  /// and the queue is finished (or, without `wait`, when nothing is queued).
  std::vector<request> take(queue& q, size_t most, bool wait);
  /// A ring's thread about to wait for completions: false when requests it could take are
  /// queued already; true after registering `wake_fd` (written by the next submit) when it
  /// `can_take` more.
  bool park(queue& q, int wake_fd, bool can_take);
  void unpark(queue& q, int wake_fd);
  void complete(std::vector<io_completion> done);
  void serve_threads(queue& q);
  io_completion run_blocking(const request& r);

  std::unique_ptr<file_store> store_;
  io_engine engine_ = io_engine::threads;
  std::string engine_note_;
  std::mutex mu_;
  queue reads_;
  queue writes_;
  bool stopping_ = false;
  std::vector<io_completion> done_;
  std::condition_variable done_ready_;
  std::vector<std::thread> threads_;
};

}  // namespace kvc::disk
