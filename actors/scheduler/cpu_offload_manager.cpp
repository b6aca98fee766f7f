#include "actors/scheduler/cpu_offload_manager.hpp"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

namespace kvc::scheduler {

namespace {

static_assert(std::has_unique_object_representations_v<block_key>);  // no padding bytes

/// keys == [other, other + keys.size()), byte for byte. (An empty span may have no data:
/// memcmp must not see its null pointer, found by fuzzing under UBSan.)
bool same_keys(std::span<const block_key> keys, const block_key* other) noexcept {
  return keys.empty() || std::memcmp(keys.data(), other, keys.size_bytes()) == 0;
}

/// Keys made by block_key::from_index print as their index, other keys as 32 hex digits.
std::string describe(const block_key& k) {
  if (block_key::from_index(k.lo) == k) return std::to_string(k.lo);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
  return buf;
}

}  // namespace

template <class Policy>
result<std::unique_ptr<cpu_offload_manager<Policy>>> cpu_offload_manager<Policy>::create(
    const manager_config& cfg) {
  if (auto st = validate(cfg); !st.ok()) return st;
  try {
    return std::make_unique<cpu_offload_manager>(cfg);
  } catch (const std::bad_alloc&) {
    return make_error(errc::capacity_exhausted,
                      "cannot reserve the ledger for " + std::to_string(cfg.capacity) + " slots");
  }
}

template <class Policy>
cpu_offload_manager<Policy>::cpu_offload_manager(const manager_config& cfg)
    : cap_(cfg.capacity),
      policy_(cfg.capacity),
      tracker_(cfg.store_threshold >= 2 ? std::make_unique<reuse_tracker>(cfg.max_tracker_size)
                                        : nullptr),
      threshold_(cfg.store_threshold),
      events_on_(cfg.enable_events),
      recent_(64) {}

template <class Policy>
bool cpu_offload_manager<Policy>::lookup(const block_key& key) {
  if (tracker_) tracker_->record(key);
  const uint32_t s = policy_.find(key);
  return s != npos && policy_.node(s).ref >= 0;
}

template <class Policy>
uint32_t cpu_offload_manager<Policy>::lookup_prefix(std::span<const block_key> keys) {
  policy_.scout();
  // All keys are resolved at once (usually reused from the touch() before); the hits are then
  // taken in order up to the first miss, and only those keys are counted by the reuse filter.
  const std::span<const uint32_t> ids = resolve(keys);
  uint32_t hits = 0;
  while (hits < keys.size() && ids[hits] < cap_ && policy_.node(ids[hits]).ref >= 0) ++hits;
  // The filter counts the keys a lookup loop would have looked up: the hits and the first miss
  // (counting has no effect on the manager's answers, so it can come second).
  if (tracker_) tracker_->record_all(keys.first(std::min<size_t>(hits + 1, keys.size())));
  return hits;
}

template <class Policy>
bool cpu_offload_manager<Policy>::any_loading(std::span<const block_key> keys) {
  const std::span<const uint32_t> ids = resolve(keys);  // usually the lookup's, from the memo
  for (const uint32_t s : ids) {
    if (s < cap_ && policy_.node(s).ref > 0) return true;
  }
  return false;
}

template <class Policy>
result<std::span<const cpu_slot>> cpu_offload_manager<Policy>::prepare_load(
    std::span<const block_key> keys) {
  load_slots_.clear();
  policy_.scout();
  const std::span<const uint32_t> ids = resolve(keys);
  // Pin as we go and roll back on the first bad key: one pass, exact for repeated keys.
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t s = ids[i];
    if (s >= cap_ || policy_.node(s).ref < 0 || policy_.node(s).ref == INT32_MAX) {
      for (uint32_t done : load_slots_) --policy_.node(done).ref;
      const std::string k = describe(keys[i]);
      if (s >= cap_)
        return make_error(errc::not_found, "prepare_load: key " + k + " is not stored");
      if (policy_.node(s).ref < 0)
        return make_error(errc::not_ready,
                          "prepare_load: key " + k + " is not ready (store in flight)");
      return make_error(errc::precondition_failed,
                        "prepare_load: key " + k + " has too many loads in flight");
    }
    ++policy_.node(s).ref;
    load_slots_.push_back(s);
  }
  remember(keys, load_slots_);
  return std::span<const cpu_slot>{load_slots_};
}

template <class Policy>
status cpu_offload_manager<Policy>::complete_load(std::span<const block_key> keys) {
  policy_.scout();
  const std::span<const uint32_t> ids = resolve(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t s = ids[i];
    if (s >= cap_ || policy_.node(s).ref <= 0) {
      for (size_t j = 0; j < i; ++j) ++policy_.node(ids[j]).ref;  // undo
      const std::string k = describe(keys[i]);
      if (s >= cap_)
        return make_error(errc::not_found, "complete_load: key " + k + " is not stored");
      return make_error(errc::precondition_failed,
                        "complete_load: key " + k + " has no load in flight");
    }
    --policy_.node(s).ref;
  }
  return status::success();
}

template <class Policy>
void cpu_offload_manager<Policy>::touch(std::span<const block_key> keys) {
  policy_.touch_ids(resolve(keys));
}

template <class Policy>
void cpu_offload_manager<Policy>::touch_hinted(std::span<const block_key> keys,
                                               std::span<cpu_slot> hints) {
  if (hints.size() != keys.size()) {  // not the caller's keys: nothing to go by
    touch(keys);
    return;
  }
  const size_t n = keys.size();
  uint32_t* ids = memo_room(n);
  // LRU checks the hints and moves the blocks in one pass from the end while the hints are
  // right; what it leaves (usually nothing) is resolved and touched below. A last key with no
  // hint (a new request's keys, blocks not stored yet) leaves everything: not even tried.
  size_t rest = n;
  if constexpr (requires { policy_.touch_hinted_suffix(keys, hints.data()); }) {
    if (n > 0 && hints[n - 1] < cap_) rest = policy_.touch_hinted_suffix(keys, hints.data());
    std::copy(hints.begin() + rest, hints.end(), ids + rest);  // right hints are the ids
  }
  if (rest == 0) {
    memo_keep(keys);
    return;
  }
  const auto no_hint = [this](cpu_slot h) { return h >= cap_; };
  if (std::all_of(hints.begin(), hints.begin() + rest, no_hint)) {
    // Nothing to check (a new request's keys): all looked up in one batch, in place.
    policy_.find_all(keys.first(rest), ids);
    for (size_t i = 0; i < rest; ++i) hints[i] = ids[i] < cap_ ? ids[i] : npos;
  } else {
    for (size_t i = 0; i < rest; ++i) {
      if (hints[i] < cap_) __builtin_prefetch(&policy_.node(hints[i]));
    }
    // A hint is right when its slot is in use and holds the key: a tracked slot maps exactly
    // its key (freed and leaked slots carry free_ref); the others are looked up in one batch.
    if (miss_at_.size() < rest) {  // grow only: no per-call fill
      miss_at_.resize(rest);
      miss_keys_.resize(rest);
      miss_ids_.resize(rest);
    }
    uint32_t* const at = miss_at_.data();
    block_key* const missed = miss_keys_.data();
    size_t m = 0;
    for (size_t i = 0; i < rest; ++i) {
      const uint32_t h = hints[i];
      if (h < cap_ && policy_.node(h).ref != free_ref && policy_.node(h).has_key(keys[i])) {
        ids[i] = h;
      } else {
        at[m] = static_cast<uint32_t>(i);
        missed[m++] = keys[i];
      }
    }
    if (m > 0) {
      policy_.find_all(std::span<const block_key>{missed, m}, miss_ids_.data());
      for (size_t j = 0; j < m; ++j) {
        const uint32_t id = miss_ids_[j];
        ids[at[j]] = id;
        hints[at[j]] = id < cap_ ? id : npos;
      }
    }
  }
  // The resolved ids become the memo, as resolve() would have left it (a lookup_prefix of
  // these keys, e.g. right after touching a request's blocks, reuses them).
  memo_keep(keys);
  policy_.touch_ids(std::span<const uint32_t>{ids, rest});
}

template <class Policy>
std::optional<store_plan> cpu_offload_manager<Policy>::prepare_store(
    std::span<const block_key> keys) {
  if (!tracker_) return store(keys);
  filtered_.clear();
  constexpr size_t ahead = 8;
  for (size_t i = 0; i < keys.size() && i < ahead; ++i) tracker_->prefetch(keys[i]);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + ahead < keys.size()) tracker_->prefetch(keys[i + ahead]);
    if (tracker_->count(keys[i]) >= threshold_) filtered_.push_back(keys[i]);
  }
  skipped_ += keys.size() - filtered_.size();
  return store(filtered_);
}

template <class Policy>
std::optional<store_plan> cpu_offload_manager<Policy>::store(std::span<const block_key> keys) {
  const uint32_t epoch = next_epoch();
  to_store_.clear();
  store_slots_.clear();
  absent_at_.clear();
  const std::span<const uint32_t> ids = resolve(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t s = ids[i];
    if (s >= cap_) {  // absent (or an ARC ghost)
      to_store_.push_back(keys[i]);
      absent_at_.push_back(static_cast<uint32_t>(i));
    } else {
      policy_.node(s).protect(epoch);  // R1: protected = set(all input keys)
    }
  }
  if (to_store_.empty()) return store_plan{};

  const int64_t need = static_cast<int64_t>(to_store_.size()) - free_slots();
  std::span<const block_key> evicted;
  if (need > 0) {
    if (need > policy_.size()) return std::nullopt;  // evict could not find that many
    const auto n = static_cast<uint32_t>(need);
    if (!policy_.evict(n, epoch, victims_, evicted_)) return std::nullopt;
    for (uint32_t v = 0; v < n; ++v) free_slot(victims_[v]);
    evicted = std::span<const block_key>{evicted_}.first(n);
    if (events_on_) {
      events_.push_back({kv_event_kind::removed, static_cast<uint32_t>(event_keys_.size()), n});
      event_keys_.insert(event_keys_.end(), evicted.begin(), evicted.end());
    }
  }
  bool duplicates = false;
  for (const block_key& k : to_store_) {
    const uint32_t s = allocate_slot();
    duplicates |= !policy_.insert(k, s);
    store_slots_.push_back(s);
  }
  patch_memo(duplicates);
  remember(to_store_, store_slots_);
  return store_plan{to_store_, store_slots_, evicted};
}

template <class Policy>
void cpu_offload_manager<Policy>::complete_store(std::span<const block_key> keys, bool success) {
  policy_.scout();
  if (success) {
    const auto begin = static_cast<uint32_t>(event_keys_.size());
    const std::span<const uint32_t> ids = resolve(keys);  // the index does not change below
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t s = ids[i];
      if (s >= cap_ || policy_.node(s).ref >= 0) continue;
      policy_.node(s).ref = 0;
      if (events_on_) event_keys_.push_back(keys[i]);
    }
    const auto end = static_cast<uint32_t>(event_keys_.size());
    if (end > begin) events_.push_back({kv_event_kind::stored, begin, end - begin});
    return;
  }
  for (const block_key& k : keys) {  // one by one: removals change the table
    const uint32_t s = policy_.find(k);
    if (s == npos || policy_.node(s).ref >= 0) continue;
    policy_.remove(s);
    free_slot(s);
  }
}

template <class Policy>
void cpu_offload_manager<Policy>::reset() {
  policy_.clear();
  // Every slot handed out so far is free; the pool starts over from slot 0 (vLLM main clears
  // its free list and allocation count), so the free list is dropped rather than refilled.
  for (uint32_t s = 0; s < high_water_; ++s) policy_.node(s).ref = free_ref;
  high_water_ = 0;
  free_head_ = npos;
  free_count_ = 0;
  // Resolutions cached from before name slots that are free now: drop them.
  memo_version_ = UINT64_MAX;
  memo_size_ = 0;
  for (auto& slots : recent_) slots.clear();
}

template <class Policy>
std::vector<kv_event> cpu_offload_manager<Policy>::take_events() {
  std::vector<kv_event> out;
  out.reserve(events_.size());
  for (const event_record& e : events_) {
    const auto first = event_keys_.begin() + e.begin;
    out.push_back(kv_event{e.kind, medium::cpu, std::vector<block_key>(first, first + e.count)});
  }
  events_.clear();
  event_keys_.clear();
  return out;
}

template <class Policy>
void cpu_offload_manager<Policy>::drain_events(const event_visitor& fn) {
  for (const event_record& e : events_)
    fn(e.kind, std::span<const block_key>{event_keys_.data() + e.begin, e.count});
  events_.clear();
  event_keys_.clear();
}

template <class Policy>
size_t cpu_offload_manager<Policy>::memory_bytes() const noexcept {
  return policy_.memory_bytes() + (tracker_ ? tracker_->memory_bytes() : 0);
}

template <class Policy>
std::span<const uint32_t> cpu_offload_manager<Policy>::resolve(std::span<const block_key> keys) {
  const auto src = reinterpret_cast<uintptr_t>(keys.data());
  const uint64_t version = policy_.index_version();
  if (version == memo_version_ && src >= memo_src_ &&
      (src - memo_src_) % sizeof(block_key) == 0) {
    const size_t offset = (src - memo_src_) / sizeof(block_key);
    if (offset + keys.size() <= memo_size_ && same_keys(keys, memo_keys_.data() + offset)) {
      memo_offset_ = offset;
      memo_len_ = keys.size();
      memo_served_ = true;
      return {memo_ids_.data() + offset, keys.size()};
    }
  }
  if (const uint32_t* slots = recall(keys)) {  // the memo stays as it is
    memo_served_ = false;
    return {slots, keys.size()};
  }
  policy_.find_all(keys, memo_room(keys.size()));
  memo_keep(keys);
  return {memo_ids_.data(), keys.size()};
}

template <class Policy>
uint32_t* cpu_offload_manager<Policy>::memo_room(size_t n) {
  if (memo_ids_.size() < n) {  // grow only: no per-call fill or reallocation
    memo_ids_.resize(n);
    memo_keys_.resize(n);
  }
  return memo_ids_.data();
}

template <class Policy>
void cpu_offload_manager<Policy>::memo_keep(std::span<const block_key> keys) {
  if (!keys.empty()) std::memcpy(memo_keys_.data(), keys.data(), keys.size_bytes());
  memo_size_ = keys.size();
  memo_src_ = reinterpret_cast<uintptr_t>(keys.data());
  memo_version_ = policy_.index_version();
  memo_offset_ = 0;
  memo_len_ = keys.size();
  memo_served_ = true;
}

template <class Policy>
size_t cpu_offload_manager<Policy>::recent_index(std::span<const block_key> keys) noexcept {
  const block_key& k = keys.front();
  return static_cast<size_t>(block_key::mix(k.hi ^ k.lo ^ keys.size()) & 63);
}

template <class Policy>
void cpu_offload_manager<Policy>::remember(std::span<const block_key> keys,
                                           std::span<const uint32_t> slots) {
  if (keys.empty()) return;
  recent_[recent_index(keys)].assign(slots.begin(), slots.end());
}

template <class Policy>
const uint32_t* cpu_offload_manager<Policy>::recall(std::span<const block_key> keys) const {
  if (keys.empty()) return nullptr;
  // The batch is not compared key by key: its nodes are the proof (whatever batch left these
  // slots here, a live node holding keys[i] is keys[i]'s slot).
  const std::vector<uint32_t>& slots = recent_[recent_index(keys)];
  if (slots.size() != keys.size()) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    const block_node& n = policy_.node(slots[i]);
    if (n.ref == block_node::dead_ref || !n.has_key(keys[i])) return nullptr;
  }
  return slots.data();
}

template <class Policy>
void cpu_offload_manager<Policy>::patch_memo(bool had_duplicates) {
  // store() resolved its keys through the memo at memo_offset_ and then only (a) inserted the
  // absent ones and (b) evicted unprotected blocks, i.e. none of its own keys.
  if (had_duplicates || !memo_served_) {
    // A repeated key moved slots, or the keys came from recall(): just drop the memo.
    memo_version_ = UINT64_MAX;
    return;
  }
  for (size_t j = 0; j < absent_at_.size(); ++j)
    memo_ids_[memo_offset_ + absent_at_[j]] = store_slots_[j];
  // Entries outside this call's keys may have been evicted (slot freed or reused) or, if
  // absent, inserted by it: confirm residents by their node, resolve the others again.
  // A node whose key this call changed is a victim it freed and handed to one of its inserts
  // (ref -1, epoch 0); a node with ref >= 0, or pending with an epoch, kept its key (the memo
  // was valid when the call began), so only the others need their key compared.
  auto revalidate = [this](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const uint32_t id = memo_ids_[i];
      if (id < cap_) {
        const block_node& n = policy_.node(id);
        if (n.ref >= 0 || (n.ref == -1 && (n.mark & block_node::epoch_mask) != 0)) continue;
        if (n.ref != free_ref && n.has_key(memo_keys_[i])) continue;
      }
      memo_ids_[i] = policy_.find_id(memo_keys_[i]);
    }
  };
  revalidate(0, memo_offset_);
  revalidate(memo_offset_ + memo_len_, memo_size_);
  memo_version_ = policy_.index_version();
}

template <class Policy>
uint32_t cpu_offload_manager<Policy>::busy() const noexcept {
  uint32_t n = 0;
  for (uint32_t s = 0; s < high_water_; ++s) {
    const int32_t ref = policy_.node(s).ref;
    if (ref != 0 && ref != free_ref) ++n;
  }
  return n;
}

template <class Policy>
std::optional<int32_t> cpu_offload_manager<Policy>::ref_count(const block_key& key) const {
  const uint32_t s = policy_.find(key);
  if (s == npos) return std::nullopt;
  return policy_.node(s).ref;
}

template <class Policy>
uint32_t cpu_offload_manager<Policy>::allocate_slot() noexcept {
  if (high_water_ < cap_) return high_water_++;
  const uint32_t s = free_head_;
  free_head_ = policy_.node(s).next;
  --free_count_;
  return s;
}

template <class Policy>
void cpu_offload_manager<Policy>::free_slot(uint32_t slot) noexcept {
  policy_.node(slot).ref = free_ref;
  policy_.node(slot).next = free_head_;  // the node is out of every list now
  free_head_ = slot;
  ++free_count_;
}

template <class Policy>
uint32_t cpu_offload_manager<Policy>::next_epoch() noexcept {
  if (epoch_ == block_node::epoch_mask) {
    policy_.clear_epochs(high_water_);
    epoch_ = 0;
  }
  return ++epoch_;
}

template class cpu_offload_manager<lru_policy>;
template class cpu_offload_manager<arc_policy>;

}  // namespace kvc::scheduler
