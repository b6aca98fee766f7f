#pragma once
/// forwarding_manager: an offload_manager that hands every call to an inner manager unchanged,
/// the base of decorators (leveldb EnvWrapper style): a decorator overrides only the calls it
/// observes (records, times, filters) and forwards through inner(). A method added to
/// offload_manager is forwarded here once, for every decorator.
///
/// Owns the inner manager; thread-safety is the inner manager's (none).
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "actors/scheduler/offload_manager.hpp"

namespace kvc::scheduler {

class forwarding_manager : public offload_manager {
 public:
  explicit forwarding_manager(std::unique_ptr<offload_manager> inner) : inner_(std::move(inner)) {}

  bool lookup(const block_key& key) override { return inner_->lookup(key); }
  uint32_t lookup_prefix(std::span<const block_key> keys) override {
    return inner_->lookup_prefix(keys);
  }
  result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> keys) override {
    return inner_->prepare_load(keys);
  }
  status complete_load(std::span<const block_key> keys) override {
    return inner_->complete_load(keys);
  }
  bool any_loading(std::span<const block_key> keys) override { return inner_->any_loading(keys); }
  void touch(std::span<const block_key> keys) override { inner_->touch(keys); }
  void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) override {
    inner_->touch_hinted(keys, hints);
  }
  std::optional<store_plan> prepare_store(std::span<const block_key> keys) override {
    return inner_->prepare_store(keys);
  }
  void complete_store(std::span<const block_key> keys, bool success) override {
    inner_->complete_store(keys, success);
  }
  void reset() override { inner_->reset(); }
  std::vector<kv_event> take_events() override { return inner_->take_events(); }
  void drain_events(const event_visitor& fn) override { inner_->drain_events(fn); }
  uint32_t capacity() const noexcept override { return inner_->capacity(); }
  uint32_t size() const noexcept override { return inner_->size(); }
  uint32_t busy() const noexcept override { return inner_->busy(); }
  size_t memory_bytes() const noexcept override { return inner_->memory_bytes(); }
  uint64_t stores_skipped() const noexcept override { return inner_->stores_skipped(); }

 protected:
  offload_manager& inner() noexcept { return *inner_; }

 private:
  std::unique_ptr<offload_manager> inner_;
};

}  // namespace kvc::scheduler
