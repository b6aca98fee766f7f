// vLLM R1 CPUOffloadingManager + LRUCachePolicy scenarios (reference spec §9 items 1, 2, 15, 16).
#include "actors/scheduler/cpu_offload_manager.hpp"

#include <algorithm>
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

}  // namespace
}  // namespace kvc::scheduler
