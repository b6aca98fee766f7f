#pragma once
/// file_tier_io: the real tier_io, forwarding every call to a borrowed disk::file_io (which
/// must outlive it). Thread-safe as file_io is.
#include <cstdint>
#include <span>
#include <vector>

#include "actors/worker/tier_io.hpp"
#include "disk/file_io.hpp"

namespace kvc::worker {

class file_tier_io final : public tier_io {
 public:
  explicit file_tier_io(disk::file_io& io) : io_(&io) {}

  void submit_write(uint64_t ticket, const block_key& key, std::span<const char> payload) override {
    io_->submit_write(ticket, key, payload);
  }
  void submit_read(uint64_t ticket, const block_key& key, std::span<char> into) override {
    io_->submit_read(ticket, key, into);
  }
  void submit_check(uint64_t ticket, const block_key& key) override {
    io_->submit_check(ticket, key);
  }
  void submit_remove(uint64_t ticket, const block_key& key) override {
    io_->submit_remove(ticket, key);
  }
  std::vector<uint64_t> cancel(std::span<const uint64_t> tickets) override {
    return io_->cancel(tickets);
  }
  std::vector<disk::io_completion> take_completions() override { return io_->take_completions(); }
  std::vector<disk::io_completion> wait_completions() override { return io_->wait_completions(); }

 private:
  disk::file_io* io_;
};

}  // namespace kvc::worker
