#pragma once
/// recording_manager: an offload_manager decorator (leveldb EnvWrapper style) for end-to-end
/// tests. Every call is forwarded to the real manager unchanged; touches, prefix lookups and
/// store preparations are recorded so that a test can check what the connector asked for
/// (vLLM's tests assert these calls on a mock; here the real ledger still answers).
/// Test support; not thread-safe.
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/scheduler/offload_manager.hpp"

namespace kvc::testing {

class recording_manager final : public scheduler::offload_manager {
 public:
  struct store_call {
    std::vector<block_key> keys;                    ///< the input
    std::optional<std::vector<block_key>> planned;  ///< keys to store, nullopt = no room
  };
  struct record {
    std::vector<std::vector<block_key>> touches;
    uint64_t keys_looked_up = 0;  ///< keys lookup() / lookup_prefix() actually examined
    std::vector<store_call> stores;
  };

  explicit recording_manager(std::unique_ptr<offload_manager> inner) : inner_(std::move(inner)) {}

  /// What was recorded since the last call.
  record take_record() { return std::exchange(rec_, {}); }

  bool lookup(const block_key& key) override {
    ++rec_.keys_looked_up;
    return inner_->lookup(key);
  }
  bool any_loading(std::span<const block_key> keys) override { return inner_->any_loading(keys); }
  uint32_t lookup_prefix(std::span<const block_key> keys) override {
    const uint32_t hits = inner_->lookup_prefix(keys);
    rec_.keys_looked_up += std::min<uint64_t>(uint64_t{hits} + 1, keys.size());
    return hits;
  }
  result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> keys) override {
    return inner_->prepare_load(keys);
  }
  status complete_load(std::span<const block_key> keys) override {
    return inner_->complete_load(keys);
  }
  void touch(std::span<const block_key> keys) override {
    rec_.touches.emplace_back(keys.begin(), keys.end());
    inner_->touch(keys);
  }
  void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) override {
    rec_.touches.emplace_back(keys.begin(), keys.end());  // recorded as the touch it is
    inner_->touch_hinted(keys, hints);
  }
  std::optional<scheduler::store_plan> prepare_store(std::span<const block_key> keys) override {
    auto plan = inner_->prepare_store(keys);
    store_call call{{keys.begin(), keys.end()}, std::nullopt};
    if (plan) call.planned.emplace(plan->keys.begin(), plan->keys.end());
    rec_.stores.push_back(std::move(call));
    return plan;
  }
  void complete_store(std::span<const block_key> keys, bool success) override {
    inner_->complete_store(keys, success);
  }
  std::vector<kv_event> take_events() override { return inner_->take_events(); }
  void drain_events(const event_visitor& fn) override { inner_->drain_events(fn); }
  uint32_t capacity() const noexcept override { return inner_->capacity(); }
  uint32_t size() const noexcept override { return inner_->size(); }
  size_t memory_bytes() const noexcept override { return inner_->memory_bytes(); }

 private:
  std::unique_ptr<offload_manager> inner_;
  record rec_;
};

}  // namespace kvc::testing
