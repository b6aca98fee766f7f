#include "actors/record/hash_memory.hpp"

namespace kvc::record {

uint32_t hash_memory::written(std::string_view id, std::span<const block_key> hashes) {
  const auto n = static_cast<uint32_t>(hashes.size());
  auto it = counts_.find(std::string{id});
  if (it == counts_.end()) {
    counts_.emplace(std::string{id}, n);
    return 0;
  }
  const uint32_t known = it->second <= n ? it->second : 0;
  it->second = n;
  return known;
}

bool hash_memory::extend(const std::string& id, uint32_t from, std::vector<block_key>& tail) {
  auto it = lists_.find(id);
  if (from == 0) {
    if (it == lists_.end()) {
      lists_.emplace(id, tail);
    } else {
      it->second = tail;
    }
    return true;
  }
  if (it == lists_.end() || it->second.size() != from) return false;
  it->second.insert(it->second.end(), tail.begin(), tail.end());
  tail = it->second;
  return true;
}

void hash_memory::forget(std::string_view id) {
  counts_.erase(std::string{id});
  lists_.erase(std::string{id});
}

}  // namespace kvc::record
