#pragma once
/// gated_tier_io: a tier_io for tests that does a block I/O only when the test says so, on a
/// real disk::file_store, on the test's thread. A submitted request is *queued* (cancel()
/// withdraws it) until begin_queued() marks it *running* (a thread took it: cancel() leaves it)
/// or a run_* call does it. take_completions() never does any I/O; wait_completions() does the
/// oldest running request, else the oldest queued one (what a real I/O thread would finish).
///
/// It records every *conflict*: a request submitted while an earlier one is still outstanding
/// (queued or running) on overlapping memory where either writes that memory (a read of a file
/// into a slot, against any I/O of that slot), or on the same block's file where either is a
/// write or a removal. A tier_executor must never cause one: either request could land last.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/worker/tier_io.hpp"
#include "disk/file_store.hpp"

namespace kvc::worker::testing {

class gated_tier_io final : public tier_io {
 public:
  explicit gated_tier_io(std::unique_ptr<disk::file_store> store) : store_(std::move(store)) {}

  void submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload) override {
    submit(
        {ticket, disk::io_kind::write, key, {const_cast<char*>(payload.data()), payload.size()}});
  }
  void submit_read(uint64_t ticket, const block_key& key, std::span<char> into) override {
    submit({ticket, disk::io_kind::read, key, into});
  }
  void submit_check(uint64_t ticket, const block_key& key) override {
    submit({ticket, disk::io_kind::check, key, {}});
  }
  void submit_remove(uint64_t ticket, const block_key& key) override {
    submit({ticket, disk::io_kind::remove, key, {}});
  }
  std::vector<uint64_t> cancel(std::span<const uint64_t> tickets) override {
    std::vector<uint64_t> out;
    std::erase_if(outstanding_, [&](const request& r) {
      if (r.running || std::find(tickets.begin(), tickets.end(), r.ticket) == tickets.end())
        return false;
      out.push_back(r.ticket);
      return true;
    });
    return out;
  }
  std::vector<disk::io_completion> take_completions() override { return std::exchange(done_, {}); }
  std::vector<disk::io_completion> wait_completions() override {
    if (done_.empty()) {
      const auto running = std::find_if(outstanding_.begin(), outstanding_.end(),
                                        [](const request& r) { return r.running; });
      if (running != outstanding_.end()) {
        run(running);
      } else if (!outstanding_.empty()) {
        run(outstanding_.begin());
      } else {
        // A real file_io would block forever: the caller waits for nothing it submitted.
        throw std::logic_error("gated_tier_io: wait_completions with nothing outstanding");
      }
    }
    return std::exchange(done_, {});
  }

  /// Marks every queued request running (threads took them; cancel() can no longer withdraw).
  void begin_queued() {
    for (request& r : outstanding_) r.running = true;
  }
  /// Does the queued requests (not the running ones), oldest first.
  void run_queued() {
    run_where([](const request& r) { return !r.running; });
  }
  /// Does every outstanding request, oldest first.
  void run_all() {
    run_where([](const request&) { return true; });
  }

  size_t outstanding() const noexcept { return outstanding_.size(); }
  const std::vector<std::string>& conflicts() const noexcept { return conflicts_; }
  /// The requests done, in order: "<kind> <key index>" (key.lo), e.g. "read 1".
  const std::vector<std::string>& done_log() const noexcept { return done_log_; }
  disk::file_store& store() noexcept { return *store_; }

 private:
  struct request {
    uint64_t ticket = 0;
    disk::io_kind kind = disk::io_kind::write;
    block_key key;
    std::span<char> buffer;
    bool running = false;
  };

  static const char* name(disk::io_kind k) {
    switch (k) {
      case disk::io_kind::write:
        return "write";
      case disk::io_kind::read:
        return "read";
      case disk::io_kind::check:
        return "check";
      case disk::io_kind::remove:
        return "remove";
    }
    return "?";
  }
  static std::string describe(const request& r) {
    return std::string{name(r.kind)} + " " + std::to_string(r.key.lo);
  }
  static bool overlap(std::span<char> a, std::span<char> b) {
    return !a.empty() && !b.empty() && a.data() < b.data() + b.size() &&
           b.data() < a.data() + a.size();
  }
  static bool changes_file(disk::io_kind k) {
    return k == disk::io_kind::write || k == disk::io_kind::remove;
  }

  void submit(request r) {
    for (const request& o : outstanding_) {
      const bool memory = overlap(r.buffer, o.buffer) &&
                          (r.kind == disk::io_kind::read || o.kind == disk::io_kind::read);
      const bool file = r.key == o.key && (changes_file(r.kind) || changes_file(o.kind));
      if (memory || file) conflicts_.push_back(describe(r) + " while " + describe(o));
    }
    outstanding_.push_back(r);
  }

  void run(std::vector<request>::iterator it) {
    const request r = *it;
    outstanding_.erase(it);
    status s;
    switch (r.kind) {
      case disk::io_kind::write:
        s = store_->write(r.key, r.buffer);
        break;
      case disk::io_kind::read:
        s = store_->read(r.key, r.buffer);
        break;
      case disk::io_kind::check:
        s = store_->check(r.key);
        break;
      case disk::io_kind::remove:
        s = store_->remove(r.key);
        break;
    }
    const bool moves = r.kind == disk::io_kind::write || r.kind == disk::io_kind::read;
    const uint64_t bytes = s.ok() && moves ? r.buffer.size() : 0;
    done_log_.push_back(describe(r));
    done_.push_back({r.ticket, r.kind, r.key, std::move(s), bytes});
  }

  template <class Pred>
  void run_where(Pred pred) {
    for (;;) {
      const auto it = std::find_if(outstanding_.begin(), outstanding_.end(), pred);
      if (it == outstanding_.end()) return;
      run(it);
    }
  }

  std::unique_ptr<disk::file_store> store_;
  std::vector<request> outstanding_;  ///< oldest first
  std::vector<disk::io_completion> done_;
  std::vector<std::string> conflicts_;
  std::vector<std::string> done_log_;
};

}  // namespace kvc::worker::testing
