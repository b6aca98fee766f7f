#pragma once
/// recording_manager: an offload_manager decorator (scheduler::forwarding_manager) for end-to-end
/// tests. Every call is forwarded to the real manager unchanged; touches, prefix lookups and
/// store preparations are recorded so that a test can check what the connector asked for
/// (vLLM's tests assert these calls on a mock; here the real ledger still answers).
/// Test support; not thread-safe.
#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/scheduler/forwarding_manager.hpp"

namespace kvc::testing {

class recording_manager final : public scheduler::forwarding_manager {
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

  explicit recording_manager(std::unique_ptr<offload_manager> inner)
      : forwarding_manager(std::move(inner)) {}

  /// What was recorded since the last call.
  record take_record() { return std::exchange(rec_, {}); }

  bool lookup(const block_key& key) override {
    ++rec_.keys_looked_up;
    return inner().lookup(key);
  }
  uint32_t lookup_prefix(std::span<const block_key> keys) override {
    const uint32_t hits = inner().lookup_prefix(keys);
    rec_.keys_looked_up += std::min<uint64_t>(uint64_t{hits} + 1, keys.size());
    return hits;
  }
  void touch(std::span<const block_key> keys) override {
    rec_.touches.emplace_back(keys.begin(), keys.end());
    inner().touch(keys);
  }
  void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) override {
    rec_.touches.emplace_back(keys.begin(), keys.end());  // recorded as the touch it is
    inner().touch_hinted(keys, hints);
  }
  std::optional<scheduler::store_plan> prepare_store(std::span<const block_key> keys) override {
    auto plan = inner().prepare_store(keys);
    store_call call{{keys.begin(), keys.end()}, std::nullopt};
    if (plan) call.planned.emplace(plan->keys.begin(), plan->keys.end());
    rec_.stores.push_back(std::move(call));
    return plan;
  }

 private:
  record rec_;
};

}  // namespace kvc::testing
