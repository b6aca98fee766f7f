#include "disk/file_io.hpp"

#include <utility>

namespace kvc::disk {

result<std::unique_ptr<file_io>> file_io::create(std::unique_ptr<file_store> store,
                                                 uint32_t n_read_threads,
                                                 uint32_t n_write_threads) {
  if (n_read_threads == 0 || n_write_threads == 0) {
    return make_error(errc::invalid_argument,
                      "file tier: n_read_threads and n_write_threads must be >= 1");
  }
  std::unique_ptr<file_io> io{new file_io(std::move(store))};
  io->start(io->reads_, n_read_threads);
  io->start(io->writes_, n_write_threads);
  return io;
}

file_io::file_io(std::unique_ptr<file_store> store) : store_(std::move(store)) {}

file_io::~file_io() {
  {
    std::lock_guard lock{mu_};
    stopping_ = true;
  }
  reads_.ready.notify_all();
  writes_.ready.notify_all();
  for (std::thread& t : threads_) t.join();
}

void file_io::start(queue& q, uint32_t threads) {
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this, &q] { serve(q); });
}

void file_io::submit(queue& q, job j) {
  {
    std::lock_guard lock{mu_};
    q.jobs.push_back(std::move(j));
  }
  q.ready.notify_one();
}

void file_io::serve(queue& q) {
  for (;;) {
    job j;
    {
      std::unique_lock lock{mu_};
      q.ready.wait(lock, [&] { return stopping_ || !q.jobs.empty(); });
      if (q.jobs.empty()) return;  // stopping, and the queue is finished
      j = std::move(q.jobs.front());
      q.jobs.pop_front();
    }
    io_completion c = j();
    {
      std::lock_guard lock{mu_};
      done_.push_back(std::move(c));
    }
    done_ready_.notify_all();
  }
}

void file_io::submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload) {
  submit(writes_, [this, ticket, key, payload] {
    status s = store_->write(key, payload);
    const uint64_t bytes = s.ok() ? payload.size() : 0;
    return io_completion{ticket, io_kind::write, key, std::move(s), bytes};
  });
}

void file_io::submit_read(uint64_t ticket, const block_key& key, std::span<char> into) {
  submit(reads_, [this, ticket, key, into] {
    status s = store_->read(key, into);
    const uint64_t bytes = s.ok() ? into.size() : 0;
    return io_completion{ticket, io_kind::read, key, std::move(s), bytes};
  });
}

void file_io::submit_check(uint64_t ticket, const block_key& key) {
  submit(reads_, [this, ticket, key] {
    return io_completion{ticket, io_kind::check, key, store_->check(key), 0};
  });
}

void file_io::submit_remove(uint64_t ticket, const block_key& key) {
  submit(writes_, [this, ticket, key] {
    return io_completion{ticket, io_kind::remove, key, store_->remove(key), 0};
  });
}

std::vector<io_completion> file_io::take_completions() {
  std::lock_guard lock{mu_};
  return std::exchange(done_, {});
}

std::vector<io_completion> file_io::wait_completions() {
  std::unique_lock lock{mu_};
  done_ready_.wait(lock, [&] { return !done_.empty(); });
  return std::exchange(done_, {});
}

}  // namespace kvc::disk
