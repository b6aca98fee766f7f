#pragma once
/// KV cache events: which blocks became loadable from a medium, and which were removed.
/// Mirrors vLLM's OffloadingEvent / BlockStored / BlockRemoved.
#include <cstdint>
#include <string_view>
#include <vector>

#include "proto/block_key.hpp"

namespace kvc {

/// Where a block lives: the GPU's KV cache, the CPU pool, the file tier. to_string gives vLLM's
/// medium strings (vllm/distributed/kv_events.py: "CPU"; "STORAGE" for vLLM main's fs tier).
enum class medium : uint8_t { gpu = 0, cpu = 1, fs = 2 };
enum class kv_event_kind : uint8_t { stored = 0, removed = 1 };

struct kv_event {
  kv_event_kind kind = kv_event_kind::stored;
  medium where = medium::cpu;
  std::vector<block_key> keys;

  friend bool operator==(const kv_event&, const kv_event&) = default;
};

constexpr std::string_view to_string(kv_event_kind k) noexcept {
  return k == kv_event_kind::stored ? "stored" : "removed";
}
constexpr std::string_view to_string(medium m) noexcept {
  switch (m) {
    case medium::gpu: return "GPU";
    case medium::cpu: return "CPU";
    case medium::fs: return "STORAGE";
  }
  return "UNKNOWN";
}

}  // namespace kvc
