#pragma once
/// Helpers for the offload-manager tests: integer keys (block_key::from_index), readable
/// conversions of spans / events, and a full snapshot of a manager's observable state.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/cpu_offload_manager.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "proto/block_key.hpp"
#include "proto/kv_event.hpp"

namespace kvc::scheduler::testing {

inline block_key k(uint64_t i) { return block_key::from_index(i); }

inline std::vector<block_key> keys(std::initializer_list<uint64_t> ids) {
  std::vector<block_key> out;
  for (uint64_t i : ids) out.push_back(k(i));
  return out;
}

inline std::vector<uint64_t> ids(std::span<const block_key> ks) {
  std::vector<uint64_t> out;
  for (const block_key& x : ks) out.push_back(x.to_index());
  return out;
}

inline std::vector<uint32_t> slots(std::span<const cpu_slot> s) { return {s.begin(), s.end()}; }

using u64s = std::vector<uint64_t>;
using u32s = std::vector<uint32_t>;

/// An event with integer keys, for EXPECT_EQ.
struct ev {
  kv_event_kind kind;
  u64s keys;
  friend bool operator==(const ev&, const ev&) = default;
  friend std::ostream& operator<<(std::ostream& os, const ev& e) {
    os << to_string(e.kind) << "{";
    for (size_t i = 0; i < e.keys.size(); ++i) os << (i ? "," : "") << e.keys[i];
    return os << "}";
  }
};
inline ev stored(u64s ks) { return {kv_event_kind::stored, std::move(ks)}; }
inline ev removed(u64s ks) { return {kv_event_kind::removed, std::move(ks)}; }

inline std::vector<ev> events(offload_manager& m) {
  std::vector<ev> out;
  for (const kv_event& e : m.take_events()) {
    EXPECT_EQ(e.where, medium::cpu);
    out.push_back({e.kind, ids(e.keys)});
  }
  return out;
}

/// A store plan copied out of the manager's buffers.
struct plan {
  u64s keys;
  u32s slots;
  u64s evicted;
  friend bool operator==(const plan&, const plan&) = default;
  friend std::ostream& operator<<(std::ostream& os, const plan& p) {
    os << "plan{keys=";
    for (auto x : p.keys) os << x << ",";
    os << " slots=";
    for (auto x : p.slots) os << x << ",";
    os << " evicted=";
    for (auto x : p.evicted) os << x << ",";
    return os << "}";
  }
};

inline std::optional<plan> ps(offload_manager& m, std::initializer_list<uint64_t> ks) {
  auto r = m.prepare_store(keys(ks));
  if (!r) return std::nullopt;
  return plan{ids(r->keys), slots(r->slots), ids(r->evicted)};
}
inline void cs(offload_manager& m, std::initializer_list<uint64_t> ks, bool ok = true) {
  m.complete_store(keys(ks), ok);
}
inline void ps_cs(offload_manager& m, std::initializer_list<uint64_t> ks) {
  ASSERT_TRUE(m.prepare_store(keys(ks)).has_value());
  m.complete_store(keys(ks), true);
}
inline u32s pl(offload_manager& m, std::initializer_list<uint64_t> ks) {
  auto r = m.prepare_load(keys(ks));
  EXPECT_TRUE(r.ok()) << r.error().to_string();
  return r.ok() ? slots(*r) : u32s{};
}
inline void cl(offload_manager& m, std::initializer_list<uint64_t> ks) {
  auto st = m.complete_load(keys(ks));
  EXPECT_TRUE(st.ok()) << st.to_string();
}
inline void t(offload_manager& m, std::initializer_list<uint64_t> ks) { m.touch(keys(ks)); }
inline bool lk(offload_manager& m, uint64_t key) { return m.lookup(k(key)); }

inline manager_config config(uint32_t capacity, eviction_policy p = eviction_policy::lru,
                             uint32_t threshold = 0, uint32_t tracker = 64000) {
  manager_config c;
  c.capacity = capacity;
  c.policy = p;
  c.store_threshold = threshold;
  c.max_tracker_size = tracker;
  return c;
}

inline std::unique_ptr<lru_offload_manager> make_lru(uint32_t cap, uint32_t threshold = 0,
                                                     uint32_t tracker = 64000) {
  auto m = lru_offload_manager::create(config(cap, eviction_policy::lru, threshold, tracker));
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return std::move(*m);
}
inline std::unique_ptr<arc_offload_manager> make_arc(uint32_t cap) {
  auto m = arc_offload_manager::create(config(cap, eviction_policy::arc));
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return std::move(*m);
}

/// Everything observable about a manager except its pending events: ordering of every list,
/// every tracked key's ref count and slot, p, the free-slot count and the tracker.
struct snapshot {
  std::vector<u64s> lists;
  std::vector<std::pair<int32_t, uint32_t>> blocks;  // (ref, slot) in list order
  double p = 0;
  uint32_t free = 0;
  uint32_t size = 0;
  std::vector<std::pair<uint64_t, uint32_t>> tracker;
  friend bool operator==(const snapshot&, const snapshot&) = default;
};

template <class Policy>
snapshot snap(const cpu_offload_manager<Policy>& m) {
  snapshot s;
  std::vector<std::vector<block_key>> resident;
  if constexpr (std::is_same_v<Policy, arc_policy>) {
    resident = {m.policy().t1_keys(), m.policy().t2_keys()};
    s.lists = {ids(resident[0]), ids(resident[1]), ids(m.policy().b1_keys()),
               ids(m.policy().b2_keys())};
    s.p = m.policy().target_t1_size();
  } else {
    resident = {m.policy().keys()};
    s.lists = {ids(resident[0])};
  }
  for (const auto& list : resident)
    for (const block_key& key : list)
      s.blocks.emplace_back(m.policy().node(m.policy().find(key)).ref, m.policy().find(key));
  s.free = m.free_slots();
  s.size = m.size();
  if (m.tracker())
    for (const auto& [key, count] : m.tracker()->entries())
      s.tracker.emplace_back(key.to_index(), count);
  return s;
}

}  // namespace kvc::scheduler::testing

namespace kvc::scheduler::testing {

/// snap() through the interface (the concrete type is found with dynamic_cast).
inline snapshot snap_any(const offload_manager& m) {
  if (auto* lru = dynamic_cast<const lru_offload_manager*>(&m)) return snap(*lru);
  if (auto* arc = dynamic_cast<const arc_offload_manager*>(&m)) return snap(*arc);
  ADD_FAILURE() << "unknown offload_manager implementation";
  return {};
}

}  // namespace kvc::scheduler::testing
