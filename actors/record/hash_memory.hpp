#pragma once
/// hash_memory: which block hashes of each live request a run record already holds. A
/// request's hashes are written once; later events carry only those appended since (the
/// planner's contract: a request's block_hashes only grow, and the planner itself reads only
/// the appended ones). The writer and the reader each keep one and update it in the same event
/// order; request_finished forgets the request on both sides.
///
/// Owns its tables; not thread-safe (one writer or reader).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "proto/block_key.hpp"

namespace kvc::record {

class hash_memory {
 public:
  /// Writer: how many leading hashes of `hashes` the record already has for `id` (0 when none,
  /// or when the list is shorter than what was written: then it is written whole); the record
  /// has all of them afterwards.
  uint32_t written(std::string_view id, std::span<const block_key> hashes);
  /// Reader: `tail` holds the hashes from position `from` on; it becomes the whole list. False
  /// (nothing changed) when `from` is not 0 and not the number of hashes known for `id`.
  bool extend(const std::string& id, uint32_t from, std::vector<block_key>& tail);
  /// The request finished: both sides forget it.
  void forget(std::string_view id);

 private:
  std::unordered_map<std::string, uint32_t> counts_;                 // writer
  std::unordered_map<std::string, std::vector<block_key>> lists_;    // reader
};

}  // namespace kvc::record
