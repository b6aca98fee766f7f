// vLLM R1 FilterReusedOffloadingManager (store_threshold >= 2) on top of the manager
// (reference spec §4, §9 item 12).
#include "actors/scheduler/reuse_tracker.hpp"

#include <gtest/gtest.h>

#include "tests/scheduler/manager_test_util.hpp"

namespace kvc::scheduler {
namespace {

using namespace testing;

using counts = std::vector<std::pair<uint64_t, uint32_t>>;

counts tracked(const lru_offload_manager& m) { return snap(m).tracker; }

// §9.12
TEST(ReuseFilterTest, StoresOnlyKeysLookedUpThresholdTimes) {
  auto m = make_lru(8, /*threshold=*/2, /*tracker=*/3);
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(lk(*m, 2));
  EXPECT_EQ(ps(*m, {1, 2}), (plan{}));
  EXPECT_EQ(m->stores_skipped(), 2u);

  EXPECT_FALSE(lk(*m, 1));
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1}, {0}, {}}));
  EXPECT_EQ(m->stores_skipped(), 3u);  // 2 was left out again
  EXPECT_EQ(tracked(*m), (counts{{2, 1}, {1, 2}}));

  EXPECT_FALSE(lk(*m, 3));
  EXPECT_FALSE(lk(*m, 4));  // full: drops 2, the least recent
  EXPECT_EQ(tracked(*m), (counts{{1, 2}, {3, 1}, {4, 1}}));
  EXPECT_FALSE(lk(*m, 2));  // drops 1, restarts 2 at 1
  EXPECT_EQ(tracked(*m), (counts{{3, 1}, {4, 1}, {2, 1}}));
  EXPECT_EQ(ps(*m, {2}), (plan{}));
}

// vLLM main's reset_cache leaves FilterReused's counts (its `counts` OrderedDict) as they are.
TEST(ReuseFilterTest, ResetKeepsTheLookupCounts) {
  auto m = make_lru(8, /*threshold=*/2, /*tracker=*/3);
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1}, {0}, {}}));
  cs(*m, {1});
  m->reset();
  EXPECT_EQ(tracked(*m), (counts{{1, 2}}));
  EXPECT_EQ(m->stores_skipped(), 1u);
  // 1 passes the filter again at once, into slot 0 of the emptied pool.
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1}, {0}, {}}));
}

TEST(ReuseFilterTest, TouchAndStoreDoNotCount) {
  auto m = make_lru(8, 2, 10);
  t(*m, {1, 1, 1});
  EXPECT_EQ(ps(*m, {1}), (plan{}));
  EXPECT_EQ(ps(*m, {1}), (plan{}));
  EXPECT_TRUE(tracked(*m).empty());
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_EQ(ps(*m, {1}), (plan{{1}, {0}, {}}));
  cs(*m, {1});
  EXPECT_TRUE(lk(*m, 1));  // hits count too, and stores never reset counts
  EXPECT_EQ(tracked(*m), (counts{{1, 3}}));
}

TEST(ReuseFilterTest, HigherThresholdAndKeyOrderPreserved) {
  auto m = make_lru(8, 3, 10);
  for (uint64_t key : {5, 4, 5, 4, 5, 4, 6}) (void)lk(*m, key);
  EXPECT_EQ(ps(*m, {6, 4, 7, 5}), (plan{{4, 5}, {0, 1}, {}}));
}

TEST(ReuseFilterTest, LookupPrefixCountsOnlyKeysLookedUp) {
  auto m = make_lru(8, 2, 10);
  EXPECT_EQ(m->lookup_prefix(keys({1, 2, 3})), 0u);
  EXPECT_EQ(tracked(*m), (counts{{1, 1}}));
}

// §4 "consequence (verified)": with threshold 2, a repeated 32-block prefix needs 64 requests
// (touch, prefix lookup, load hits, store the rest) to be stored completely.
TEST(ReuseFilterTest, RepeatedPrefixGrowsOneBlockPerTwoRequests) {
  auto m = make_lru(64, 2, 1000);
  std::vector<block_key> req;
  for (uint64_t i = 0; i < 32; ++i) req.push_back(k(100 + i));
  int requests = 0;
  while (m->size() < 32 && requests < 200) {
    ++requests;
    m->touch(req);
    const uint32_t h = m->lookup_prefix(req);
    auto span = std::span<const block_key>{req};
    ASSERT_TRUE(m->prepare_load(span.first(h)).ok());
    auto plan = m->prepare_store(span.subspan(h));
    ASSERT_TRUE(plan);
    ASSERT_LE(plan->keys.size(), 1u);  // only the first missing block is ever counted
    std::vector<block_key> stored{plan->keys.begin(), plan->keys.end()};
    m->complete_store(stored, true);
    ASSERT_TRUE(m->complete_load(span.first(h)).ok());
  }
  EXPECT_EQ(requests, 64);
}

TEST(ReuseFilterTest, WorksWithArc) {
  manager_config c = config(4, eviction_policy::arc, 2, 4);
  auto m = offload_manager::create(c);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(lk(**m, 1));
  EXPECT_EQ(ps(**m, {1}), (plan{}));
  EXPECT_FALSE(lk(**m, 1));
  EXPECT_EQ(ps(**m, {1}), (plan{{1}, {0}, {}}));
}

TEST(ReuseTrackerTest, SaturatesInsteadOfWrapping) {
  reuse_tracker tr{2};
  tr.record(k(1));
  tr.record(k(2));
  tr.record(k(1));
  EXPECT_EQ(tr.count(k(1)), 2u);
  EXPECT_EQ(tr.count(k(2)), 1u);
  EXPECT_EQ(tr.count(k(3)), 0u);
  tr.record(k(3));  // drops 2
  EXPECT_EQ(tr.count(k(2)), 0u);
  EXPECT_EQ(tr.size(), 2u);
  EXPECT_EQ(tr.max_size(), 2u);
}

}  // namespace
}  // namespace kvc::scheduler
