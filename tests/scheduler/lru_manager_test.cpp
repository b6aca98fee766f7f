// vLLM R1 CPUOffloadingManager + LRUCachePolicy scenarios (reference spec §9 items 1, 2, 15, 16).
#include "actors/scheduler/cpu_offload_manager.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "tests/scheduler/manager_test_util.hpp"

namespace kvc::scheduler {
namespace {

using namespace testing;

// §9.1
TEST(LruManagerTest, StoreLookupEvictSequence) {
  auto m = make_lru(4);
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1, 2}, {0, 1}, {}}));
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(lk(*m, 2));
  EXPECT_TRUE(events(*m).empty());

  cs(*m, {1, 2});
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1, 2})}));
  EXPECT_TRUE(lk(*m, 1));
  EXPECT_TRUE(lk(*m, 2));
  EXPECT_FALSE(lk(*m, 3));

  EXPECT_EQ(ps(*m, {2, 3, 4, 5}), (plan{{3, 4, 5}, {2, 3, 0}, {1}}));
  EXPECT_EQ(events(*m), (std::vector<ev>{removed({1})}));
  EXPECT_EQ(ids(m->policy().keys()), (u64s{2, 3, 4, 5}));

  const snapshot before = snap(*m);
  EXPECT_EQ(ps(*m, {1, 6}), std::nullopt);
  EXPECT_EQ(snap(*m), before);
  EXPECT_TRUE(events(*m).empty());
}

// §9.2 (continues §9.1)
TEST(LruManagerTest, LoadsPinAndTouchReorders) {
  auto m = make_lru(4);
  ps_cs(*m, {1, 2});
  ASSERT_TRUE(ps(*m, {2, 3, 4, 5}));
  (void)m->take_events();

  cs(*m, {2, 3, 4, 5});
  EXPECT_EQ(pl(*m, {2, 3}), (u32s{1, 2}));
  EXPECT_EQ(ps(*m, {6, 7, 8}), std::nullopt);  // only 4 and 5 are idle

  cl(*m, {2, 3});
  EXPECT_EQ(ps(*m, {6, 7, 8}), (plan{{6, 7, 8}, {3, 2, 1}, {2, 3, 4}}));
  cs(*m, {6, 7, 8});

  t(*m, {5, 6, 7});
  EXPECT_EQ(ids(m->policy().keys()), (u64s{8, 7, 6, 5}));
  EXPECT_EQ(ps(*m, {9}), (plan{{9}, {1}, {8}}));

  cs(*m, {7, 9}, /*ok=*/false);
  EXPECT_TRUE(lk(*m, 7));
  EXPECT_FALSE(lk(*m, 9));
  EXPECT_EQ(ids(m->policy().keys()), (u64s{7, 6, 5}));
  EXPECT_EQ(m->free_slots(), 1u);

  EXPECT_EQ(events(*m), (std::vector<ev>{stored({3, 4, 5}), removed({2, 3, 4}),
                                         stored({6, 7, 8}), removed({8})}));
}

TEST(LruManagerTest, GetDoesNotReorderButTouchDoes) {
  auto m = make_lru(3);
  ps_cs(*m, {1, 2, 3});
  EXPECT_TRUE(lk(*m, 1));
  EXPECT_EQ(pl(*m, {1}), (u32s{0}));
  cl(*m, {1});
  EXPECT_EQ(ids(m->policy().keys()), (u64s{1, 2, 3}));
  t(*m, {2, 9, 1});  // reversed: 1 then (absent 9) then 2 -> 2 most recent
  EXPECT_EQ(ids(m->policy().keys()), (u64s{3, 1, 2}));
  EXPECT_EQ(ps(*m, {4}), (plan{{4}, {2}, {3}}));
}

TEST(LruManagerTest, TouchMovesPendingBlocksToo) {
  auto m = make_lru(3);
  ps_cs(*m, {1});
  ASSERT_TRUE(ps(*m, {2}));
  t(*m, {2});
  EXPECT_EQ(ids(m->policy().keys()), (u64s{1, 2}));
  t(*m, {1});
  EXPECT_EQ(ids(m->policy().keys()), (u64s{2, 1}));
}

TEST(LruManagerTest, EvictionSkipsPinnedAtColdEnd) {
  auto m = make_lru(4);
  ps_cs(*m, {1, 2, 3, 4});
  EXPECT_EQ(pl(*m, {1, 2}), (u32s{0, 1}));
  EXPECT_EQ(ps(*m, {5, 6}), (plan{{5, 6}, {3, 2}, {3, 4}}));
  EXPECT_EQ(ids(m->policy().keys()), (u64s{1, 2, 5, 6}));
}

// touch() splices runs of keys that already follow each other in the list at once; key-by-key
// touches in reverse order are R1's definition. Random key lists built from stretches of the
// list, in list order or reversed, with untracked keys between them.
TEST(LruManagerTest, TouchOfRunsMatchesKeyByKeyTouch) {
  constexpr uint32_t cap = 64;
  auto batch = make_lru(cap);
  auto single = make_lru(cap);
  for (uint64_t i = 0; i < cap; ++i) {
    ps_cs(*batch, {i});
    ps_cs(*single, {i});
  }
  std::mt19937_64 rng{7};
  for (int round = 0; round < 2000; ++round) {
    const std::vector<block_key> order = batch->policy().keys();
    ASSERT_EQ(order, single->policy().keys());
    std::vector<block_key> touched;
    while (touched.size() < 24) {
      const size_t at = rng() % order.size();
      const size_t len = 1 + rng() % 6;
      std::vector<block_key> run;
      for (size_t j = at; j < order.size() && run.size() < len; ++j) run.push_back(order[j]);
      if (rng() % 2) std::reverse(run.begin(), run.end());
      touched.insert(touched.end(), run.begin(), run.end());
      if (rng() % 4 == 0) touched.push_back(k(1000 + rng() % 8));  // untracked
    }
    batch->touch(touched);
    for (size_t j = touched.size(); j-- > 0;) single->touch(std::span{&touched[j], 1});
  }
  EXPECT_EQ(batch->policy().keys(), single->policy().keys());
}

// R1's LRUCachePolicy + CPUOffloadingManager as a plain list, oldest first: the reference for
// touch_hinted's one-pass walk (hint check and run moves together).
struct reference_lru {
  struct entry {
    block_key key;
    int ref;  // -1 store in flight, 0 idle, n loads
  };
  uint32_t cap;
  std::vector<entry> order;

  std::vector<entry>::iterator find(const block_key& key) {
    return std::find_if(order.begin(), order.end(), [&](const entry& e) { return e.key == key; });
  }
  void touch(std::span<const block_key> ks) {
    for (size_t j = ks.size(); j-- > 0;) {
      auto it = find(ks[j]);
      if (it == order.end()) continue;
      const entry e = *it;
      order.erase(it);
      order.push_back(e);
    }
  }
  /// The evicted keys, or nullopt when eviction cannot make room (nothing changes).
  std::optional<std::vector<block_key>> prepare_store(std::span<const block_key> ks) {
    std::vector<block_key> fresh;
    for (const block_key& key : ks) {
      if (find(key) == order.end() && std::find(fresh.begin(), fresh.end(), key) == fresh.end())
        fresh.push_back(key);
    }
    std::vector<block_key> evicted;
    if (fresh.empty()) return evicted;
    const size_t need = order.size() + fresh.size() > cap ? order.size() + fresh.size() - cap : 0;
    for (const entry& e : order) {
      if (evicted.size() == need) break;
      if (e.ref == 0 && std::find(ks.begin(), ks.end(), e.key) == ks.end())
        evicted.push_back(e.key);
    }
    if (evicted.size() < need) return std::nullopt;
    for (const block_key& key : evicted) order.erase(find(key));
    for (const block_key& key : fresh) order.push_back({key, -1});
    return evicted;
  }
  void complete_store(std::span<const block_key> ks, bool success) {
    for (const block_key& key : ks) {
      auto it = find(key);
      if (it == order.end() || it->ref != -1) continue;
      if (success) it->ref = 0;
      else order.erase(it);
    }
  }
  std::vector<block_key> keys() const {
    std::vector<block_key> out;
    for (const entry& e : order) out.push_back(e.key);
    return out;
  }
};

// touch_hinted walks the keys from the end, checking each hint and extending runs of blocks
// that already follow each other in one pass. Against a plain list: hints that are right,
// stale (the key was evicted and its slot now holds another key, often a neighbour in the
// list), out of range or absent; pinned and in-flight blocks that eviction skips; failed
// stores that remove blocks; keys touched again and repeated within one touch.
TEST(LruManagerTest, TouchHintedMatchesPlainList) {
  constexpr uint32_t cap = 48;
  auto m = make_lru(cap);
  reference_lru ref{cap, {}};
  std::mt19937_64 rng{11};
  // Requests: key lists with their hints, as the planner keeps them.
  struct request {
    std::vector<block_key> keys;
    std::vector<cpu_slot> hints;
  };
  std::vector<request> reqs(6);
  auto fill = [&](request& r) {
    r.keys.clear();
    const size_t len = 1 + rng() % 20;
    while (r.keys.size() < len) {  // distinct keys, as a request's blocks are
      const block_key key = k(rng() % 80);
      if (std::find(r.keys.begin(), r.keys.end(), key) == r.keys.end()) r.keys.push_back(key);
    }
    r.hints.assign(r.keys.size(), UINT32_MAX);
  };
  for (request& r : reqs) fill(r);
  // The touch, and then every hint is the key's slot, or npos for an untracked key.
  auto touch = [&](std::span<const block_key> ks, std::span<cpu_slot> hints) {
    m->touch_hinted(ks, hints);
    ref.touch(ks);
    for (size_t j = 0; j < ks.size(); ++j) {
      const bool tracked = ref.find(ks[j]) != ref.order.end();
      ASSERT_EQ(hints[j] < cap, tracked);
      if (tracked) {
        ASSERT_TRUE(m->policy().node(hints[j]).has_key(ks[j]));
      }
    }
  };
  std::vector<std::vector<block_key>> pinned;
  for (int step = 0; step < 20000; ++step) {
    request& r = reqs[rng() % reqs.size()];
    switch (rng() % 8) {
      case 0:
        fill(r);
        break;
      case 1:
      case 2: {  // store, then the planner's touch of every key
        const auto want = ref.prepare_store(r.keys);
        const auto got = m->prepare_store(r.keys);
        ASSERT_EQ(want.has_value(), got.has_value());
        if (!got) break;
        ASSERT_EQ(ids(*want), ids(got->evicted));
        const std::vector<block_key> stored{got->keys.begin(), got->keys.end()};
        touch(r.keys, r.hints);
        const bool ok = rng() % 5 != 0;
        m->complete_store(stored, ok);
        ref.complete_store(stored, ok);
        break;
      }
      case 3:
        if (rng() % 8 == 0) r.hints[rng() % r.hints.size()] = static_cast<cpu_slot>(rng() % 64);
        [[fallthrough]];
      default:
        touch(r.keys, r.hints);
        break;
      case 4: {  // keys repeated within one touch
        std::vector<block_key> twice = r.keys;
        twice.insert(twice.end(), r.keys.begin(), r.keys.end());
        std::vector<cpu_slot> hints = r.hints;
        hints.insert(hints.end(), r.hints.begin(), r.hints.end());
        touch(twice, hints);
        break;
      }
      case 5: {  // pin the request's longest stored prefix (or release the oldest pins)
        if (!pinned.empty() && rng() % 2 == 0) {
          ASSERT_TRUE(m->complete_load(pinned.front()).ok());
          for (const block_key& key : pinned.front()) --ref.find(key)->ref;
          pinned.erase(pinned.begin());
          break;
        }
        const uint32_t hits = m->lookup_prefix(r.keys);
        if (hits == 0) break;
        std::vector<block_key> prefix{r.keys.begin(), r.keys.begin() + hits};
        ASSERT_TRUE(m->prepare_load(prefix).ok());
        for (const block_key& key : prefix) ++ref.find(key)->ref;
        pinned.push_back(std::move(prefix));
        break;
      }
    }
    ASSERT_EQ(ids(m->policy().keys()), ids(ref.keys())) << "step " << step;
  }
}

}  // namespace
}  // namespace kvc::scheduler
