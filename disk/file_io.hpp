#pragma once
/// file_io: the file tier's asynchronous I/O over one file_store: reads (promotions) and checks
/// (lookups) on `n_read_threads` threads, writes (cascades) and removals on `n_write_threads`, each
/// group with its own FIFO queue so that a burst of cascades never delays a promotion. Submits
/// return at once; completions are collected with take_completions() (never blocks) or
/// wait_completions() (blocks until at least one is there: benchmarks and tests).
///
/// The caller keeps the memory of a submitted read or write valid and untouched until its
/// completion is taken (the scheduler's ledger pins the pool slot). The destructor finishes the
/// queued work, then joins the threads. Thread-safe.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "disk/file_store.hpp"
#include "proto/block_key.hpp"
#include "proto/status.hpp"

namespace kvc::disk {

enum class io_kind : uint8_t { write, read, check, remove };

struct io_completion {
  uint64_t ticket = 0;  ///< the caller's number for the request
  io_kind kind = io_kind::write;
  block_key key;
  status outcome;
  uint64_t bytes = 0;  ///< KV bytes moved (0 for a check, a removal or a failure)
};

class file_io {
 public:
  /// errc::invalid_argument when a thread count is 0.
  static result<std::unique_ptr<file_io>> create(std::unique_ptr<file_store> store,
                                                 uint32_t n_read_threads,
                                                 uint32_t n_write_threads);
  ~file_io();
  file_io(const file_io&) = delete;
  file_io& operator=(const file_io&) = delete;

  void submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload);
  void submit_read(uint64_t ticket, const block_key& key, std::span<char> into);
  void submit_check(uint64_t ticket, const block_key& key);
  void submit_remove(uint64_t ticket, const block_key& key);

  /// The completions so far, in the order they finished; never blocks.
  std::vector<io_completion> take_completions();
  /// Blocks until at least one completion is there, then takes them all.
  std::vector<io_completion> wait_completions();

  file_store& store() noexcept { return *store_; }

 private:
  using job = std::function<io_completion()>;
  struct queue {
    std::deque<job> jobs;
    std::condition_variable ready;
  };

  file_io(std::unique_ptr<file_store> store);
  void start(queue& q, uint32_t threads);
  void submit(queue& q, job j);
  void serve(queue& q);

  std::unique_ptr<file_store> store_;
  std::mutex mu_;
  queue reads_;
  queue writes_;
  bool stopping_ = false;
  std::vector<io_completion> done_;
  std::condition_variable done_ready_;
  std::vector<std::thread> threads_;
};

}  // namespace kvc::disk
