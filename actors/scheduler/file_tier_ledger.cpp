#include "actors/scheduler/file_tier_ledger.hpp"

#include <utility>

namespace kvc::scheduler {

std::string_view to_string(tier_lookup l) noexcept {
  switch (l) {
    case tier_lookup::miss: return "miss";
    case tier_lookup::hit: return "hit";
    case tier_lookup::ask_again: return "ask_again";
  }
  return "unknown";
}

result<file_tier_ledger> file_tier_ledger::create(const file_tier_limits& limits) {
  if (limits.block_file_bytes == 0) {
    return make_error(errc::invalid_argument, "file tier: a block file of 0 bytes");
  }
  if (limits.max_pending_cascades == 0) {
    return make_error(errc::invalid_argument, "file tier: max_pending_cascades must be >= 1");
  }
  const uint64_t blocks = limits.capacity_bytes / limits.block_file_bytes;
  if (blocks == 0) {
    return make_error(errc::invalid_argument,
                      "file tier: capacity_bytes " + std::to_string(limits.capacity_bytes) +
                          " holds no block file of " + std::to_string(limits.block_file_bytes) +
                          " bytes");
  }
  if (blocks > UINT32_MAX) {
    return make_error(errc::invalid_argument, "file tier: capacity_bytes holds more than 2^32 "
                                              "block files; use larger blocks");
  }
  return file_tier_ledger{limits};
}

file_tier_ledger::file_tier_ledger(const file_tier_limits& limits)
    : capacity_blocks_(static_cast<uint32_t>(limits.capacity_bytes / limits.block_file_bytes)),
      max_pending_(limits.max_pending_cascades) {}

void file_tier_ledger::adopt(std::span<const block_key> oldest_first) {
  for (const block_key& k : oldest_first) {
    if (!blocks_.contains(k)) track(k, block_state::ready);
  }
  while (blocks_.size() > capacity_blocks_ && evict_one()) {
  }
}

std::span<const block_key> file_tier_ledger::offer_cascade(std::span<const block_key> keys) {
  accepted_.clear();
  for (const block_key& k : keys) {
    ++stats_.cascades_offered;
    if (blocks_.contains(k)) continue;  // on disk already, or being written
    if (pending_cascades_ >= max_pending_) {
      ++stats_.cascades_skipped_queue_full;
      continue;
    }
    if (blocks_.size() >= capacity_blocks_ && !evict_one()) {
      ++stats_.cascades_skipped_no_room;
      continue;
    }
    track(k, block_state::writing);
    ++pending_cascades_;
    ++stats_.cascades_started;
    accepted_.push_back(k);
  }
  return accepted_;
}

status file_tier_ledger::complete_cascade(const block_key& key, bool ok) {
  auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.state != block_state::writing) {
    return make_error(errc::precondition_failed, "file tier: no cascade in flight for the block");
  }
  --pending_cascades_;
  if (!ok) {
    ++stats_.cascades_failed;
    drop(key);
    return status::success();
  }
  ++stats_.cascades_ok;
  it->second.state = block_state::ready;
  make_recent(it->second);
  record(kv_event_kind::stored, key);
  return status::success();
}

tier_lookup file_tier_ledger::lookup(const block_key& key, std::string_view request) {
  const auto blk = blocks_.find(key);
  auto st = lookups_.find(key);
  if (blk == blocks_.end() || blk->second.bad) {
    ++stats_.queries;
    if (st != lookups_.end() && st->second.v == verdict::hit) st->second.v = verdict::miss;
    return tier_lookup::miss;
  }
  if (blk->second.state == block_state::writing) return tier_lookup::ask_again;
  if (st == lookups_.end()) {
    st = lookups_.emplace(key, lookup_state{}).first;
    lookup_batch_.push_back(key);
  }
  if (st->second.requests.emplace(request).second) {
    request_keys_[std::string{request}].push_back(key);
  }
  switch (st->second.v) {
    case verdict::pending: return tier_lookup::ask_again;
    case verdict::miss: ++stats_.queries; return tier_lookup::miss;
    case verdict::hit: break;
  }
  ++stats_.queries;
  ++stats_.hits;
  make_recent(blk->second);
  return tier_lookup::hit;
}

std::vector<block_key> file_tier_ledger::take_lookup_batch() {
  return std::exchange(lookup_batch_, {});
}

void file_tier_ledger::on_lookup_result(const block_key& key, bool found) {
  const auto blk = blocks_.find(key);
  const bool usable = blk != blocks_.end() && blk->second.state == block_state::ready &&
                      !blk->second.bad;
  if (const auto st = lookups_.find(key); st != lookups_.end() && st->second.v == verdict::pending) {
    st->second.v = found && usable ? verdict::hit : verdict::miss;
  }
  if (!found && usable) {
    ++stats_.dropped_bad_file;
    if (blk->second.readers == 0) {
      drop(key);
    } else {
      blk->second.bad = true;  // dropped when its last promotion ends
    }
  }
}

void file_tier_ledger::request_finished(std::string_view request) {
  const auto it = request_keys_.find(std::string{request});
  if (it == request_keys_.end()) return;
  for (const block_key& k : it->second) {
    const auto st = lookups_.find(k);
    if (st == lookups_.end()) continue;
    st->second.requests.erase(it->first);
    if (st->second.requests.empty()) lookups_.erase(st);
  }
  request_keys_.erase(it);
}

status file_tier_ledger::begin_promotion(const block_key& key) {
  const auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.state != block_state::ready || it->second.bad) {
    return make_error(errc::precondition_failed, "file tier: promotion of a block not ready");
  }
  ++it->second.readers;
  ++stats_.promotions_started;
  return status::success();
}

status file_tier_ledger::complete_promotion(const block_key& key, bool ok) {
  const auto it = blocks_.find(key);
  if (it == blocks_.end() || it->second.readers == 0) {
    return make_error(errc::precondition_failed, "file tier: no promotion in flight for the block");
  }
  block& b = it->second;
  --b.readers;
  if (ok) {
    ++stats_.promotions_ok;
    if (!b.bad) make_recent(b);
  } else {
    ++stats_.promotions_failed;
    b.bad = true;
    if (const auto st = lookups_.find(key); st != lookups_.end()) st->second.v = verdict::miss;
  }
  if (b.bad && b.readers == 0) drop(key);
  return status::success();
}

void file_tier_ledger::on_pool_evicted(std::span<const block_key> keys) {
  for (const block_key& k : keys) {
    const auto it = blocks_.find(k);
    if (it == blocks_.end() || it->second.bad) ++stats_.pool_evictions_without_file;
  }
}

std::vector<block_key> file_tier_ledger::take_removed() { return std::exchange(removed_, {}); }

std::vector<kv_event> file_tier_ledger::take_events() { return std::exchange(events_, {}); }

bool file_tier_ledger::ready(const block_key& key) const {
  const auto it = blocks_.find(key);
  return it != blocks_.end() && it->second.state == block_state::ready && !it->second.bad;
}

uint32_t file_tier_ledger::readers(const block_key& key) const {
  const auto it = blocks_.find(key);
  return it == blocks_.end() ? 0 : it->second.readers;
}

std::vector<block_key> file_tier_ledger::lru_order() const { return {lru_.begin(), lru_.end()}; }

bool file_tier_ledger::evict_one() {
  for (const block_key& k : lru_) {
    const block& b = blocks_.at(k);
    if (b.state != block_state::ready || b.readers != 0) continue;
    ++stats_.evictions;
    const block_key victim = k;  // drop() erases the list node `k` lives in
    drop(victim);
    return true;
  }
  return false;
}

void file_tier_ledger::track(const block_key& key, block_state state) {
  lru_.push_back(key);
  blocks_.emplace(key, block{.state = state, .at = std::prev(lru_.end())});
}

void file_tier_ledger::drop(const block_key& key) {
  const auto it = blocks_.find(key);
  if (it->second.state == block_state::ready) record(kv_event_kind::removed, key);
  lru_.erase(it->second.at);
  blocks_.erase(it);
  removed_.push_back(key);
  if (const auto st = lookups_.find(key); st != lookups_.end()) st->second.v = verdict::miss;
}

void file_tier_ledger::make_recent(block& b) { lru_.splice(lru_.end(), lru_, b.at); }

void file_tier_ledger::record(kv_event_kind kind, const block_key& key) {
  if (!events_.empty() && events_.back().kind == kind) {
    events_.back().keys.push_back(key);
  } else {
    events_.push_back(kv_event{kind, medium::fs, {key}});
  }
}

}  // namespace kvc::scheduler
