#pragma once
/// batch_encoder: KV events as vLLM's KV-event stream lays them out (vllm/distributed/
/// kv_events.py: msgspec structs, array_like, omit_defaults, events tagged with their class
/// name), so vLLM's subscribers decode ours unchanged. One batch is the msgpack array
///   [ts, [event, ...]]            (+ data_parallel_rank when set)
/// with, per event,
///   ["BlockStored", [hash, ...], parent_hash=nil, token_ids=[], block_size, lora_id=nil,
///    medium, lora_name=nil]
///   ["BlockRemoved", [hash, ...], medium]
///   ["AllBlocksCleared"]
/// (the trailing defaults extra_keys / group_idx are omitted, as msgspec does). The offload
/// tier knows neither token ids nor parents: like vLLM's offloading connector it sends an empty
/// token list and nil. A hash is our 128-bit block key as 16 bytes (msgpack bin), hi then lo,
/// each big-endian: vLLM's bytes form of a block hash. `ts` is a float64.
///
/// Pure: no I/O, no clock (ts is passed in). Not thread-safe; cheap to create.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "proto/block_key.hpp"
#include "proto/kv_event.hpp"

namespace kvc::kv_events {

struct batch_options {
  uint32_t block_size = 0;                    ///< tokens per offloaded block
  std::optional<int64_t> data_parallel_rank;  ///< omitted when unset (vLLM's default None)
};

/// The 16 bytes of a key as a hash: hi then lo, big-endian.
std::string hash_bytes(const block_key& k);

/// One batch of the given events (each a BlockStored or BlockRemoved of its medium).
std::string encode_batch(double ts, std::span<const kv_event> events, const batch_options& o);
/// One batch holding a single AllBlocksCleared (the tier is gone: the scheduler shut down).
std::string encode_cleared(double ts, const batch_options& o);

/// Frame 2 of a published message: the sequence number, 8 bytes big-endian.
std::string sequence_bytes(uint64_t seq);
/// The replay's end marker: -1 as 8 signed big-endian bytes (all 0xff).
std::string end_of_replay();

}  // namespace kvc::kv_events
