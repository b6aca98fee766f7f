#pragma once
/// batch_decoder: reads a KV-event batch in vLLM's wire format (batch_encoder.hpp, vLLM's
/// kv_events.py) into JSON with vLLM's field names, as `kvconnect events tail` prints it:
///   {"ts": 1.5, "data_parallel_rank": null, "events": [
///     {"type": "BlockStored", "block_hashes": ["<hex>"|int, ...], "parent_block_hash": null,
///      "token_ids": [], "block_size": 16, "lora_id": null, "medium": "CPU",
///      "lora_name": null, "extra_keys": null, "group_idx": null}, ...]}
/// Fields omitted at the end of an array (msgspec's omitted defaults) read as null; bytes are
/// lower-case hex. Accepts any publisher's batches, vLLM's own included.
///
/// Pure. Errors (errc::invalid_argument, saying what was wrong): not msgpack, not a batch
/// array, an event that is not a tagged array, an unknown tag, more fields than the struct has.
#include <string_view>

#include <nlohmann/json.hpp>

#include "proto/status.hpp"

namespace kvc::kv_events {

result<nlohmann::json> decode_batch(std::string_view payload);

}  // namespace kvc::kv_events
