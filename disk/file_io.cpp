#include "disk/file_io.hpp"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "disk/uring_ring.hpp"

namespace kvc::disk {

namespace {

io_completion completion_of(uint64_t ticket, io_kind kind, const block_key& key, size_t size,
                            status s) {
  const bool moves = kind == io_kind::write || kind == io_kind::read;
  const uint64_t bytes = s.ok() && moves ? size : 0;
  return io_completion{ticket, kind, key, std::move(s), bytes};
}

}  // namespace

std::string_view name_of(io_engine e) noexcept {
  switch (e) {
    case io_engine::automatic:
      return "auto";
    case io_engine::io_uring:
      return "io_uring";
    case io_engine::threads:
      return "threads";
  }
  return "?";
}

std::optional<io_engine> io_engine_named(std::string_view name) noexcept {
  for (io_engine e : {io_engine::automatic, io_engine::io_uring, io_engine::threads}) {
    if (name_of(e) == name) return e;
  }
  return std::nullopt;
}

/// One ring's thread: takes requests of its queue while fewer than the ring's depth are in
/// flight, opens them (file_store::begin_*), sends them in one batch, then waits for a
/// completion, finishes what completed (verify) and resends what moved only in part. Where the
/// kernel has the ring's file operations, a write that needs a fresh temp file has it made by an
/// openat in the ring, and a complete write is closed here and renamed into place by a renameat
/// in the ring: the kernel's workers make and rename the files, the thread goes on submitting.
/// A request queued while it waits in the kernel wakes it through the ring's eventfd. Should
/// the ring itself fail (io_uring_submit refused), what is in flight is collected and every later
/// request is done blocking on this thread, never lost.
class file_io::ring_loop {
 public:
  ring_loop(file_io& io, queue& q, std::unique_ptr<uring_ring> ring)
      : io_(io), q_(q), ring_(std::move(ring)), slots_(ring_->depth()) {
    for (size_t i = slots_.size(); i > 0; --i) free_.push_back(i - 1);
  }

  void run() {
    ring_->arm_wake();
    broken_ = ring_->flush();
    for (;;) {
      std::vector<request> got = io_.take(q_, free_.size(), in_flight_ == 0);
      if (got.empty() && in_flight_ == 0) return;  // stopping, and the queue is finished
      std::vector<io_completion> done;
      for (const request& r : got) start(r, done);
      send(done);
      if (in_flight_ > 0) {
        const bool wait = !broken_.ok() || io_.park(q_, ring_->wake_fd(), !free_.empty());
        status s = ring_->reap(wait, [&](block_transfer* t, int res) {
          if (t != nullptr) {
            on_piece(*t, res, done);
          } else if (broken_.ok()) {
            rearm_ = true;
          }
        });
        if (wait && broken_.ok()) io_.unpark(q_, ring_->wake_fd());
        if (!s) broken_ = std::move(s);  // the waits below are blocking transfers now
        if (rearm_ && broken_.ok()) {
          rearm_ = false;
          ring_->arm_wake();
          unsent_.push_back(nullptr);
        }
        send(done);
      }
      io_.complete(std::move(done));
    }
  }

 private:
  struct slot {
    request req;
    block_transfer t;
    io_slot mem;
  };

  void start(const request& r, std::vector<io_completion>& done) {
    if (r.kind == io_kind::remove || !broken_.ok()) {
      done.push_back(io_.run_blocking(r));
      return;
    }
    const size_t i = free_.back();
    free_.pop_back();
    slot& s = slots_[i];
    s.req = r;
    s.t = block_transfer{};
    file_store& store = *io_.store_;
    status begun = r.kind == io_kind::write
                       ? store.begin_write(r.key, r.buffer, s.mem, s.t, ring_->file_ops())
                   : r.kind == io_kind::read ? store.begin_read(r.key, r.buffer, s.mem, s.t)
                                             : store.begin_check(r.key, s.mem, s.t);
    if (!begun) {
      free_.push_back(i);
      done.push_back(completion_of(r.ticket, r.kind, r.key, r.buffer.size(), std::move(begun)));
      return;
    }
    ++in_flight_;
    ring_->queue(s.t);
    unsent_.push_back(&s.t);
  }

  /// Sends what was queued; when the ring refuses, those transfers are done blocking here.
  void send(std::vector<io_completion>& done) {
    if (unsent_.empty()) return;
    if (broken_.ok()) broken_ = ring_->flush();
    if (broken_.ok()) {
      unsent_.clear();
      return;
    }
    for (block_transfer* t : std::exchange(unsent_, {})) {
      if (t != nullptr) finish_blocking(*t, done);  // nullptr: the wake-up poll
    }
  }

  void on_piece(block_transfer& t, int res, std::vector<io_completion>& done) {
    if (t.stage != transfer_stage::move) {
      on_file_op(t, res, done);
      return;
    }
    if (res == -EINTR || res == -EAGAIN) {
      // moved nothing: sent again as it is
    } else if (res < 0) {
      fail_transfer(t, -res);
    } else {
      t.advance(static_cast<uint64_t>(res));
    }
    if (t.pending()) {
      resend(t, done);
    } else if (t.op == transfer_op::write && ring_->file_ops() && broken_.ok()) {
      status closed = io_.store_->close_for_rename(t);
      if (closed.ok()) {
        resend(t, done);  // the rename
      } else {
        complete(t, std::move(closed), done);
      }
    } else {
      finish(t, done);
    }
  }

  /// The completion of a write's create (openat) or rename (renameat).
  void on_file_op(block_transfer& t, int res, std::vector<io_completion>& done) {
    if (res == -EINTR || res == -EAGAIN) {
      resend(t, done);
      return;
    }
    bool again = false;
    status s = t.stage == transfer_stage::create ? io_.store_->created(t, res, again)
                                                 : io_.store_->renamed(t, res, again);
    if (again || (s.ok() && t.stage == transfer_stage::move)) {
      resend(t, done);  // the create once more (its directory made), the bytes, or the rename
    } else {
      complete(t, std::move(s), done);  // renamed into place, or failed (nothing left behind)
    }
  }

  /// Queues the transfer's next step in the ring, or does the rest blocking when it is broken.
  void resend(block_transfer& t, std::vector<io_completion>& done) {
    if (!broken_.ok()) {
      finish_blocking(t, done);
      return;
    }
    ring_->queue(t);
    unsent_.push_back(&t);
  }

  /// The rest of `t` on this thread: its create, its bytes, then finish (close, rename or verify).
  void finish_blocking(block_transfer& t, std::vector<io_completion>& done) {
    if (t.stage == transfer_stage::create) {
      if (status s = io_.store_->create(t); !s) {
        complete(t, std::move(s), done);
        return;
      }
    }
    if (t.pending()) transfer_blocking(t);
    finish(t, done);
  }

  void finish(block_transfer& t, std::vector<io_completion>& done) {
    complete(t, io_.store_->finish(t), done);
  }

  void complete(block_transfer& t, status outcome, std::vector<io_completion>& done) {
    size_t i = 0;
    while (&slots_[i].t != &t) ++i;  // a ring's depth is small
    const request& r = slots_[i].req;
    done.push_back(completion_of(r.ticket, r.kind, r.key, r.buffer.size(), std::move(outcome)));
    free_.push_back(i);
    --in_flight_;
  }

  file_io& io_;
  queue& q_;
  std::unique_ptr<uring_ring> ring_;
  std::vector<slot> slots_;
  std::vector<size_t> free_;
  std::vector<block_transfer*> unsent_;
  size_t in_flight_ = 0;
  bool rearm_ = false;
  status broken_;
};

result<std::unique_ptr<file_io>> file_io::create(std::unique_ptr<file_store> store,
                                                 uint32_t n_read_threads,
                                                 uint32_t n_write_threads) {
  return create(std::move(store), file_io_options{.n_read_threads = n_read_threads,
                                                  .n_write_threads = n_write_threads});
}

result<std::unique_ptr<file_io>> file_io::create(std::unique_ptr<file_store> store,
                                                 const file_io_options& options) {
  if (options.n_read_threads == 0 || options.n_write_threads == 0) {
    return make_error(errc::invalid_argument,
                      "file tier: n_read_threads and n_write_threads must be >= 1");
  }
  if (options.io_depth == 0) return make_error(errc::invalid_argument, "file tier: io_depth 0");
  std::unique_ptr<file_io> io{new file_io(std::move(store))};
  if (options.engine == io_engine::threads) {
    io->engine_note_ = "io_engine: threads by configuration";
  } else {
    std::vector<std::unique_ptr<uring_ring>> rings;
    status made;
    for (uint32_t i = 0; i < options.n_read_threads + options.n_write_threads && made.ok(); ++i) {
      auto ring = uring_ring::create(options.io_depth);
      if (ring) {
        rings.push_back(std::move(ring).value());
      } else {
        made = ring.error();
      }
    }
    if (!made && options.engine == io_engine::io_uring) return made;
    if (made.ok()) {
      io->engine_ = io_engine::io_uring;
      for (uint32_t i = 0; i < rings.size(); ++i) {
        queue& q = i < options.n_read_threads ? io->reads_ : io->writes_;
        auto loop = std::make_unique<ring_loop>(*io, q, std::move(rings[i]));
        io->threads_.emplace_back([loop = std::move(loop)] { loop->run(); });
      }
      return io;
    }
    io->engine_note_ = "io_uring unavailable, threads instead: " + made.message();
  }
  io->start_threads(io->reads_, options.n_read_threads);
  io->start_threads(io->writes_, options.n_write_threads);
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

void file_io::start_threads(queue& q, uint32_t threads) {
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this, &q] { serve_threads(q); });
}

void file_io::submit(queue& q, request r) {
  int wake = -1;
  {
    std::lock_guard lock{mu_};
    q.jobs.push_back(r);
    if (!q.waiting_rings.empty()) {
      wake = q.waiting_rings.back();
      q.waiting_rings.pop_back();
    }
  }
  q.ready.notify_one();
  if (wake >= 0) uring_ring::wake(wake);
}

bool file_io::park(queue& q, int wake_fd, bool can_take) {
  if (!can_take) return true;  // full: only a completion helps
  std::lock_guard lock{mu_};
  if (!q.jobs.empty()) return false;
  q.waiting_rings.push_back(wake_fd);
  return true;
}

void file_io::unpark(queue& q, int wake_fd) {
  std::lock_guard lock{mu_};
  std::erase(q.waiting_rings, wake_fd);
}

std::vector<file_io::request> file_io::take(queue& q, size_t most, bool wait) {
  std::unique_lock lock{mu_};
  if (wait) q.ready.wait(lock, [&] { return stopping_ || !q.jobs.empty(); });
  std::vector<request> out;
  while (out.size() < most && !q.jobs.empty()) {
    out.push_back(q.jobs.front());
    q.jobs.pop_front();
  }
  return out;
}

void file_io::complete(std::vector<io_completion> done) {
  if (done.empty()) return;
  {
    std::lock_guard lock{mu_};
    for (io_completion& c : done) done_.push_back(std::move(c));
  }
  done_ready_.notify_all();
}

void file_io::serve_threads(queue& q) {
  for (;;) {
    std::vector<request> got = take(q, 1, /*wait=*/true);
    if (got.empty()) return;  // stopping, and the queue is finished
    std::vector<io_completion> done;
    done.push_back(run_blocking(got.front()));
    complete(std::move(done));
  }
}

io_completion file_io::run_blocking(const request& r) {
  status s;
  switch (r.kind) {
    case io_kind::write:
      s = store_->write(r.key, r.buffer);
      break;
    case io_kind::read:
      s = store_->read(r.key, r.buffer);
      break;
    case io_kind::check:
      s = store_->check(r.key);
      break;
    case io_kind::remove:
      s = store_->remove(r.key);
      break;
  }
  return completion_of(r.ticket, r.kind, r.key, r.buffer.size(), std::move(s));
}

void file_io::submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload) {
  // Only read from: the const is restored where the store takes it.
  submit(writes_,
         {ticket, io_kind::write, key, {const_cast<char*>(payload.data()), payload.size()}});
}

void file_io::submit_read(uint64_t ticket, const block_key& key, std::span<char> into) {
  submit(reads_, {ticket, io_kind::read, key, into});
}

void file_io::submit_check(uint64_t ticket, const block_key& key) {
  submit(reads_, {ticket, io_kind::check, key, {}});
}

void file_io::submit_remove(uint64_t ticket, const block_key& key) {
  submit(writes_, {ticket, io_kind::remove, key, {}});
}

std::vector<uint64_t> file_io::cancel(std::span<const uint64_t> tickets) {
  std::vector<uint64_t> cancelled;
  std::lock_guard lock{mu_};
  for (queue* q : {&reads_, &writes_}) {
    std::erase_if(q->jobs, [&](const request& r) {
      if (std::find(tickets.begin(), tickets.end(), r.ticket) == tickets.end()) return false;
      cancelled.push_back(r.ticket);
      return true;
    });
  }
  return cancelled;
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
