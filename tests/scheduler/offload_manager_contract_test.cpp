// Contract suite of offload_manager, run for every policy: the R1 manager rules that do not
// depend on the eviction order (reference spec §9 items 3, 15, 16) and the edge cases.
#include "actors/scheduler/offload_manager.hpp"

#include <algorithm>
#include <random>

#include <gtest/gtest.h>

#include "tests/scheduler/manager_test_util.hpp"

namespace kvc::scheduler {
namespace {

using namespace testing;

class OffloadManagerContract : public ::testing::TestWithParam<eviction_policy> {
 protected:
  std::unique_ptr<offload_manager> make(uint32_t cap, bool events = true) {
    manager_config c = config(cap, GetParam());
    c.enable_events = events;
    auto m = offload_manager::create(c);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return std::move(*m);
  }
};

// §9.3
TEST_P(OffloadManagerContract, BusyCountsStoresInFlightAndPinnedBlocks) {
  auto m = make(4);
  EXPECT_EQ(m->busy(), 0u);
  ASSERT_TRUE(ps(*m, {1, 2, 3}));
  EXPECT_EQ(m->busy(), 3u);  // stores in flight
  cs(*m, {1, 2});
  cs(*m, {3}, /*ok=*/false);  // a failed store frees its slot
  EXPECT_EQ(m->busy(), 0u);
  EXPECT_EQ(pl(*m, {1, 1, 2}), (u32s{0, 0, 1}));
  EXPECT_EQ(m->busy(), 2u);  // two blocks pinned (one twice)
  cl(*m, {1, 1});
  EXPECT_EQ(m->busy(), 1u);
  cl(*m, {2});
  EXPECT_EQ(m->busy(), 0u);
}
TEST_P(OffloadManagerContract, ProtectedInputKeyIsNeverEvicted) {
  auto m = make(4);
  ps_cs(*m, {1, 2});
  t(*m, {1});
  EXPECT_EQ(ps(*m, {2, 3, 4, 5}), (plan{{3, 4, 5}, {2, 3, 0}, {1}}));
  cs(*m, {3, 4, 5});
  EXPECT_TRUE(lk(*m, 2));
}

// §9.15
TEST_P(OffloadManagerContract, PendingKeyCountsAsPresent) {
  auto m = make(4);
  ASSERT_TRUE(ps(*m, {2}));
  EXPECT_EQ(ps(*m, {2, 3}), (plan{{3}, {1}, {}}));
}

TEST_P(OffloadManagerContract, AllSlotsPendingGivesNullAndChangesNothing) {
  auto m = make(2);
  ASSERT_TRUE(ps(*m, {1, 2}));
  const snapshot before = snap_any(*m);
  EXPECT_EQ(ps(*m, {3}), std::nullopt);
  EXPECT_EQ(snap_any(*m), before);
  EXPECT_TRUE(events(*m).empty());
}

TEST_P(OffloadManagerContract, CompleteStoreOnReadyKeyIsIgnored) {
  auto m = make(4);
  ps_cs(*m, {1});
  (void)m->take_events();
  cs(*m, {1});
  EXPECT_TRUE(events(*m).empty());
  cs(*m, {1}, /*ok=*/false);
  EXPECT_TRUE(lk(*m, 1));
  cs(*m, {7});  // absent: ignored too
  cs(*m, {7}, false);
  EXPECT_TRUE(events(*m).empty());
  EXPECT_EQ(m->size(), 1u);
}

TEST_P(OffloadManagerContract, EmptyInputs) {
  auto m = make(4);
  const auto empty = std::span<const block_key>{};
  EXPECT_EQ(ps(*m, {}), (plan{}));
  EXPECT_EQ(m->lookup_prefix(empty), 0u);
  auto loaded = m->prepare_load(empty);
  ASSERT_TRUE(loaded.ok());
  EXPECT_TRUE(loaded->empty());
  EXPECT_TRUE(m->complete_load(empty).ok());
  m->touch(empty);
  m->complete_store(empty, true);
  m->complete_store(empty, false);
  EXPECT_TRUE(events(*m).empty());
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(ps(*m, {1}), (plan{{1}, {0}, {}}));  // the pool is untouched
}

TEST_P(OffloadManagerContract, InputKeysProtectEachOther) {
  auto m = make(2);
  ps_cs(*m, {1, 2});
  const snapshot before = snap_any(*m);
  EXPECT_EQ(ps(*m, {1, 2, 3}), std::nullopt);
  EXPECT_EQ(snap_any(*m), before);
}

// §9.16
TEST_P(OffloadManagerContract, RemovedEventPrecedesStoredEvent) {
  auto m = make(2);
  ps_cs(*m, {1, 2});
  ps_cs(*m, {3});
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1, 2}), removed({1}), stored({3})}));
}

TEST_P(OffloadManagerContract, LoadSlotsFollowKeyOrder) {
  auto m = make(4);
  ps_cs(*m, {1, 2, 3});
  EXPECT_EQ(pl(*m, {2, 3, 1}), (u32s{1, 2, 0}));
}

TEST_P(OffloadManagerContract, NoIdleBlockGivesNull) {
  auto m = make(3);
  ps_cs(*m, {1, 2, 3});
  EXPECT_EQ(pl(*m, {1, 2, 3}), (u32s{0, 1, 2}));
  const snapshot before = snap_any(*m);
  EXPECT_EQ(ps(*m, {4}), std::nullopt);
  EXPECT_EQ(snap_any(*m), before);
  cl(*m, {2});
  EXPECT_EQ(ps(*m, {4}), (plan{{4}, {1}, {2}}));
}

TEST_P(OffloadManagerContract, MoreKeysThanCapacityGivesNull) {
  auto m = make(2);
  EXPECT_EQ(ps(*m, {1, 2, 3}), std::nullopt);
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1, 2}, {0, 1}, {}}));
}

TEST_P(OffloadManagerContract, CapacityOne) {
  auto m = make(1);
  EXPECT_EQ(ps(*m, {1}), (plan{{1}, {0}, {}}));
  EXPECT_EQ(ps(*m, {2}), std::nullopt);  // 1 is pending
  cs(*m, {1});
  EXPECT_EQ(pl(*m, {1}), (u32s{0}));
  EXPECT_EQ(ps(*m, {2}), std::nullopt);  // 1 is loading
  cl(*m, {1});
  EXPECT_EQ(ps(*m, {1, 2}), std::nullopt);  // 1 is protected
  EXPECT_EQ(ps(*m, {2}), (plan{{2}, {0}, {1}}));
  cs(*m, {2}, /*ok=*/false);
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(ps(*m, {3}), (plan{{3}, {0}, {}}));
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1}), removed({1})}));
}

TEST_P(OffloadManagerContract, RefCountStates) {
  auto m = make(4);
  ASSERT_TRUE(ps(*m, {1}));
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_EQ(m->lookup_prefix(keys({1})), 0u);
  cs(*m, {1});
  EXPECT_TRUE(lk(*m, 1));
  EXPECT_EQ(pl(*m, {1, 1}), (u32s{0, 0}));  // a repeated key is pinned twice
  EXPECT_EQ(pl(*m, {1}), (u32s{0}));
  EXPECT_TRUE(lk(*m, 1));  // loading blocks are ready
  cl(*m, {1, 1});
  cl(*m, {1});
  auto st = m->complete_load(keys({1}));
  EXPECT_EQ(st.code(), errc::precondition_failed);
}

TEST_P(OffloadManagerContract, PreconditionErrorsChangeNothing) {
  auto m = make(4);
  auto twin = make(4);
  for (auto* x : {m.get(), twin.get()}) {
    ps_cs(*x, {1, 2});
    ASSERT_TRUE(ps(*x, {3}));
    EXPECT_EQ(pl(*x, {2}), (u32s{1}));
  }
  const snapshot before = snap_any(*m);

  auto r = m->prepare_load(keys({1, 9}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::not_found);
  EXPECT_EQ(r.error().message(), "prepare_load: key 9 is not stored");
  r = m->prepare_load(keys({1, 2, 3}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::not_ready);
  EXPECT_EQ(r.error().message(), "prepare_load: key 3 is not ready (store in flight)");

  auto st = m->complete_load(keys({2, 1}));
  EXPECT_EQ(st.code(), errc::precondition_failed);
  EXPECT_EQ(st.message(), "complete_load: key 1 has no load in flight");
  st = m->complete_load(keys({2, 2}));  // ref 1, two unpins
  EXPECT_EQ(st.code(), errc::precondition_failed);
  EXPECT_EQ(st.message(), "complete_load: key 2 has no load in flight");
  st = m->complete_load(keys({2, 3}));  // pending
  EXPECT_EQ(st.code(), errc::precondition_failed);
  st = m->complete_load(keys({2, 8}));
  EXPECT_EQ(st.code(), errc::not_found);
  EXPECT_EQ(st.message(), "complete_load: key 8 is not stored");

  EXPECT_EQ(snap_any(*m), before);
  // ...and the future is the same as for a manager that never saw the bad calls.
  for (auto* x : {m.get(), twin.get()}) {
    cl(*x, {2});
    cs(*x, {3});
    t(*x, {3, 1});
  }
  EXPECT_EQ(ps(*m, {4, 5, 6}), ps(*twin, {4, 5, 6}));
  EXPECT_EQ(snap_any(*m), snap_any(*twin));
  EXPECT_EQ(events(*m), events(*twin));
}

TEST_P(OffloadManagerContract, FreeListIsLifoAfterFreshIds) {
  auto m = make(4);
  ASSERT_TRUE(ps(*m, {1, 2, 3}));
  cs(*m, {1, 2, 3}, /*ok=*/false);  // frees 0, 1, 2 in that order
  EXPECT_TRUE(events(*m).empty());
  EXPECT_EQ(ps(*m, {4, 5, 6, 7}), (plan{{4, 5, 6, 7}, {3, 2, 1, 0}, {}}));
}

// R1 quirk (§9 / §2 step 1): a key repeated in one prepare_store gets two slots, one leaks.
TEST_P(OffloadManagerContract, RepeatedStoreKeyLeaksASlot) {
  auto m = make(4);
  EXPECT_EQ(ps(*m, {7, 8, 7}), (plan{{7, 8, 7}, {0, 1, 2}, {}}));
  EXPECT_EQ(m->size(), 2u);
  cs(*m, {7, 8, 7});
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({7, 8})}));
  EXPECT_EQ(pl(*m, {7}), (u32s{2}));  // the later slot won
  cl(*m, {7});
  const snapshot s = snap_any(*m);
  EXPECT_EQ(s.lists[0], (u64s{7, 8}));  // 7 kept its place
  EXPECT_EQ(s.free, 1u);                // slot 0 leaked
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1, 2}, {3, 2}, {7}}));
}

TEST_P(OffloadManagerContract, EventsCanBeDisabled) {
  auto m = make(1, /*events=*/false);
  ps_cs(*m, {1});
  ps_cs(*m, {2});
  EXPECT_TRUE(m->take_events().empty());
  int calls = 0;
  m->drain_events([&](kv_event_kind, std::span<const block_key>) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST_P(OffloadManagerContract, DrainEventsVisitsInOrderAndClears) {
  auto m = make(1);
  ps_cs(*m, {1});
  ps_cs(*m, {2});
  std::vector<ev> seen;
  m->drain_events([&](kv_event_kind kind, std::span<const block_key> ks) {
    seen.push_back({kind, ids(ks)});
  });
  EXPECT_EQ(seen, (std::vector<ev>{stored({1}), removed({1}), stored({2})}));
  EXPECT_TRUE(m->take_events().empty());
}

TEST_P(OffloadManagerContract, LookupPrefixStopsAtFirstMiss) {
  auto m = make(8);
  ps_cs(*m, {1, 2, 4});
  ASSERT_TRUE(ps(*m, {5}));
  EXPECT_EQ(m->lookup_prefix(keys({1, 2, 3, 4})), 2u);
  EXPECT_EQ(m->lookup_prefix(keys({1, 2, 4})), 3u);
  EXPECT_EQ(m->lookup_prefix(keys({4, 5, 1})), 1u);  // pending 5 is a miss
  EXPECT_EQ(m->lookup_prefix(keys({3, 1})), 0u);
}

TEST_P(OffloadManagerContract, FootprintPerEntryIsAtMost48Bytes) {
  constexpr uint32_t cap = 65536;
  auto m = make(cap);
  for (uint64_t i = 0; i < cap; i += 32) {  // request-sized batches, as in service
    std::vector<block_key> batch;
    for (uint64_t j = i; j < i + 32; ++j) batch.push_back(k(j));
    ASSERT_TRUE(m->prepare_store(batch));
    m->complete_store(batch, true);
    (void)m->take_events();
  }
  ASSERT_EQ(m->size(), cap);
  // LRU tracks cap blocks; ARC additionally reserves two ghost pools of cap keys.
  const size_t entries = GetParam() == eviction_policy::arc ? 3 * size_t{cap} : cap;
  const double per_entry = double(m->memory_bytes()) / double(entries);
  RecordProperty("bytes_per_entry", std::to_string(per_entry));
  EXPECT_LE(per_entry, 48.0);
}

TEST_P(OffloadManagerContract, AnyLoadingSeesOnlyKeysPinnedByLoads) {
  auto m = make(4);
  const std::vector<block_key> stored{k(1), k(2)};
  ASSERT_TRUE(m->prepare_store(stored));
  EXPECT_FALSE(m->any_loading(stored));  // stores in flight are not loads
  m->complete_store(stored, true);
  EXPECT_FALSE(m->any_loading(stored));
  const std::vector<block_key> two{k(2)};
  ASSERT_TRUE(m->prepare_load(two).ok());
  EXPECT_TRUE(m->any_loading(stored));
  EXPECT_FALSE(m->any_loading(std::vector<block_key>{k(1), k(9)}));  // idle and absent
  ASSERT_TRUE(m->complete_load(two).ok());
  EXPECT_FALSE(m->any_loading(stored));
  EXPECT_FALSE(m->any_loading({}));
}

TEST_P(OffloadManagerContract, TouchHintedWritesBackEachKeysSlot) {
  auto m = make(4);
  const std::vector<block_key> keys{k(1), k(2), k(3)};
  auto p = m->prepare_store(keys);
  ASSERT_TRUE(p);
  const std::vector<cpu_slot> stored{p->slots.begin(), p->slots.end()};
  std::vector<cpu_slot> hints{UINT32_MAX, 99, stored[0]};  // unknown, out of range, wrong
  const std::vector<block_key> asked{k(1), k(2), k(3), k(7)};
  hints.push_back(stored[1]);  // k(7) is not tracked: its hint must not be believed
  m->touch_hinted(asked, hints);
  EXPECT_EQ(hints, (std::vector<cpu_slot>{stored[0], stored[1], stored[2], UINT32_MAX}));
  std::vector<cpu_slot> short_hints{0};  // not one per key: a plain touch, hints untouched
  m->touch_hinted(asked, short_hints);
  EXPECT_EQ(short_hints, std::vector<cpu_slot>{0});
}

// touch_hinted is touch whatever the hints: none at all (a new request's keys: looked up in one
// batch), all right, or some right and some not; with ARC, ghost keys among them adapt p as a
// touch does. Twins driven by touch and by touch_hinted end in the same state.
TEST_P(OffloadManagerContract, TouchHintedIsTouchWithOrWithoutHints) {
  auto hinted = make(6);
  auto plain = make(6);
  std::mt19937_64 rng{GetParam() == eviction_policy::arc ? 5u : 3u};
  std::vector<block_key> ks;
  for (uint64_t i = 0; i < 10; ++i) ks.push_back(k(i));
  std::vector<cpu_slot> hints(ks.size(), UINT32_MAX);
  for (int step = 0; step < 3000; ++step) {
    const size_t from = rng() % ks.size();
    const size_t len = 1 + rng() % (ks.size() - from);
    const std::span<const block_key> part{ks.data() + from, len};
    if (rng() % 3 == 0) {  // store some keys (evicting others: ARC keeps them as ghosts)
      const auto a = hinted->prepare_store(part);
      const auto b = plain->prepare_store(part);
      ASSERT_EQ(a.has_value(), b.has_value());
      if (!a) continue;
      ASSERT_EQ(ids(a->evicted), ids(b->evicted));
      const std::vector<block_key> stored{a->keys.begin(), a->keys.end()};
      hinted->complete_store(stored, true);
      plain->complete_store(stored, true);
    } else {
      if (rng() % 4 == 0) std::fill(hints.begin(), hints.end(), UINT32_MAX);  // no hints
      hinted->touch_hinted(part, std::span<cpu_slot>{hints.data() + from, len});
      plain->touch(part);
    }
    if (rng() % 8 == 0) std::shuffle(ks.begin(), ks.end(), rng);  // hints go stale
    ASSERT_EQ(snap_any(*hinted), snap_any(*plain)) << "step " << step;
  }
}

// The manager caches key -> slot resolutions between calls (same keys, unchanged index) and
// remembers in-flight batches. Calls made on spans of one buffer that the caller keeps
// rewriting must behave exactly like calls on fresh copies.
TEST_P(OffloadManagerContract, CachedResolutionsNeverGoStale) {
  for (uint32_t threshold : {0u, 2u}) {
    manager_config c = config(5, GetParam(), threshold, 6);
    auto a = std::move(offload_manager::create(c).value());  // spans of one mutable buffer
    auto b = std::move(offload_manager::create(c).value());  // fresh copies every call
    std::mt19937_64 rng{threshold + 7};
    std::vector<block_key> buf;
    for (uint64_t i = 0; i < 8; ++i) buf.push_back(k(rng() % 12));
    // `a` touches with hints kept next to the buffer: stale after a rewrite, sometimes garbage.
    std::vector<cpu_slot> hints(buf.size(), UINT32_MAX);
    for (int step = 0; step < 20000; ++step) {
      if (rng() % 4 == 0) buf[rng() % buf.size()] = k(rng() % 12);  // rewrite in place
      if (rng() % 16 == 0) hints[rng() % hints.size()] = static_cast<cpu_slot>(rng() % 8);
      const size_t from = rng() % buf.size();
      const size_t len = rng() % (buf.size() - from + 1);
      const std::span<const block_key> sa{buf.data() + from, len};
      const std::vector<block_key> sb{sa.begin(), sa.end()};
      switch (rng() % 7) {
        case 0:
          if (rng() % 2 == 0) {
            a->touch_hinted(sa, std::span<cpu_slot>{hints.data() + from, len});
          } else {
            a->touch(sa);
          }
          b->touch(sb);
          break;
        case 1:
          ASSERT_EQ(a->lookup_prefix(sa), b->lookup_prefix(sb));
          break;
        case 2: {
          auto ra = a->prepare_load(sa);
          auto rb = b->prepare_load(sb);
          ASSERT_EQ(ra.ok(), rb.ok());
          if (ra.ok()) ASSERT_EQ(slots(*ra), slots(*rb));
          else ASSERT_EQ(ra.error(), rb.error());
          break;
        }
        case 3:
          ASSERT_EQ(a->complete_load(sa), b->complete_load(sb));
          break;
        case 4: {
          auto pa = a->prepare_store(sa);
          auto pb = b->prepare_store(sb);
          ASSERT_EQ(pa.has_value(), pb.has_value());
          if (pa) {
            ASSERT_EQ(ids(pa->keys), ids(pb->keys));
            ASSERT_EQ(slots(pa->slots), slots(pb->slots));
            ASSERT_EQ(ids(pa->evicted), ids(pb->evicted));
          }
          break;
        }
        default: {
          const bool ok = rng() % 5 != 0;
          a->complete_store(sa, ok);
          b->complete_store(sb, ok);
        }
      }
      if (step % 500 == 0) {
        ASSERT_EQ(snap_any(*a), snap_any(*b)) << "step " << step;
        ASSERT_EQ(events(*a), events(*b));
      }
    }
  }
}

// reset (vLLM main's reset_cache): every block goes, busy ones included; no event.
TEST_P(OffloadManagerContract, ResetFreesEverySlotAndRecordsNoEvent) {
  auto m = make(4);
  ps_cs(*m, {1, 2});
  ASSERT_TRUE(ps(*m, {3}));           // a store in flight
  EXPECT_EQ(pl(*m, {1}), (u32s{0}));  // a load in flight
  ASSERT_EQ(m->busy(), 2u);
  m->reset();
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->busy(), 0u);
  EXPECT_EQ(snap_any(*m), snap_any(*make(4)));  // empty lists, every slot free
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(m->any_loading(keys({1})));
  EXPECT_EQ(m->prepare_load(keys({2})).error().code(), errc::not_found);
  // The stored event recorded before the reset is still to be taken; the reset adds none.
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1, 2})}));
  // The pool starts over from slot 0, as a new one: no eviction needed for four keys.
  EXPECT_EQ(ps(*m, {5, 6, 7, 8}), (plan{{5, 6, 7, 8}, {0, 1, 2, 3}, {}}));
  cs(*m, {5, 6, 7, 8});
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({5, 6, 7, 8})}));
}

TEST_P(OffloadManagerContract, ResetManagerBehavesAsANewOne) {
  // The same operations on a reset manager and on a new one give the same states and events,
  // whatever cached resolutions, free-list order or hints the first one held before.
  auto reset = make(3);
  ps_cs(*reset, {1, 2, 3});
  t(*reset, {2});
  EXPECT_EQ(ps(*reset, {4}), (plan{{4}, {0}, {1}}));
  cs(*reset, {4}, /*ok=*/false);
  std::vector<cpu_slot> hints = {0, 1, 2};
  reset->touch_hinted(keys({4, 2, 3}), hints);
  (void)reset->take_events();
  reset->reset();
  auto fresh = make(3);
  for (offload_manager* m : {reset.get(), fresh.get()}) {
    ps_cs(*m, {2, 3, 9});
    std::vector<cpu_slot> h = {0, 1, 2};
    m->touch_hinted(keys({3, 2, 9}), h);  // stale hints in the reset one: slots were reused
    EXPECT_EQ(h, (std::vector<cpu_slot>{1, 0, 2}));
    EXPECT_EQ(pl(*m, {2, 3}), (u32s{0, 1}));
    cl(*m, {2, 3});
    ASSERT_TRUE(ps(*m, {10, 2}));
    cs(*m, {10});
  }
  EXPECT_EQ(snap_any(*reset), snap_any(*fresh));
  EXPECT_EQ(events(*reset), events(*fresh));
}

INSTANTIATE_TEST_SUITE_P(Policies, OffloadManagerContract,
                         ::testing::Values(eviction_policy::lru, eviction_policy::arc),
                         [](const auto& info) { return std::string{to_string(info.param)}; });

}  // namespace
}  // namespace kvc::scheduler
