// vLLM R1 CPUOffloadingManager + ARCCachePolicy scenarios (reference spec §9 items 3-11, 13, 14,
// 16), asserting T1/T2/B1/B2 contents and p.
#include "actors/scheduler/cpu_offload_manager.hpp"

#include <gtest/gtest.h>

#include "tests/scheduler/manager_test_util.hpp"

namespace kvc::scheduler {
namespace {

using namespace testing;

u64s t1(const arc_offload_manager& m) { return ids(m.policy().t1_keys()); }
u64s t2(const arc_offload_manager& m) { return ids(m.policy().t2_keys()); }
u64s b1(const arc_offload_manager& m) { return ids(m.policy().b1_keys()); }
u64s b2(const arc_offload_manager& m) { return ids(m.policy().b2_keys()); }
double p(const arc_offload_manager& m) { return m.policy().target_t1_size(); }

// §9.4
TEST(ArcManagerTest, BasicSequenceAndPromotion) {
  auto m = make_arc(4);
  EXPECT_EQ(ps(*m, {1, 2}), (plan{{1, 2}, {0, 1}, {}}));
  EXPECT_FALSE(lk(*m, 1));
  EXPECT_FALSE(lk(*m, 2));
  cs(*m, {1, 2});
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1, 2})}));
  EXPECT_TRUE(lk(*m, 1));
  EXPECT_TRUE(lk(*m, 2));
  EXPECT_FALSE(lk(*m, 3));
  EXPECT_EQ(t1(*m), (u64s{1, 2}));
  EXPECT_EQ(t2(*m), u64s{});

  t(*m, {1});
  EXPECT_EQ(t1(*m), (u64s{2}));
  EXPECT_EQ(t2(*m), (u64s{1}));
  EXPECT_EQ(p(*m), 0.0);
}

// §9.5
TEST(ArcManagerTest, LoadsBlockEvictionUntilCompleted) {
  auto m = make_arc(4);
  ps_cs(*m, {1, 2, 3, 4});
  EXPECT_EQ(pl(*m, {2, 3}), (u32s{1, 2}));
  const snapshot before = snap(*m);
  EXPECT_EQ(ps(*m, {5, 6, 7}), std::nullopt);
  EXPECT_EQ(snap(*m), before);  // a failed batch evict changes nothing (§9.16)

  cl(*m, {2, 3});
  EXPECT_EQ(ps(*m, {5, 6, 7}), (plan{{5, 6, 7}, {2, 1, 0}, {1, 2, 3}}));
  EXPECT_EQ(t1(*m), (u64s{4, 5, 6, 7}));
  EXPECT_EQ(b1(*m), (u64s{1, 2, 3}));
}

// §9.6, including the verified continuation.
TEST(ArcManagerTest, GhostHitAdaptsTarget) {
  auto m = make_arc(2);
  ps_cs(*m, {1, 2});
  EXPECT_EQ(ps(*m, {3}), (plan{{3}, {0}, {1}}));
  cs(*m, {3});
  EXPECT_EQ(b1(*m), (u64s{1}));
  EXPECT_EQ(p(*m), 0.0);

  t(*m, {1});
  EXPECT_EQ(p(*m), 1.0);
  EXPECT_FALSE(lk(*m, 1));  // a ghost hit never re-admits
  t(*m, {1});
  EXPECT_EQ(p(*m), 2.0);

  EXPECT_EQ(ps(*m, {1}), (plan{{1}, {1}, {2}}));
  EXPECT_EQ(t1(*m), (u64s{3, 1}));
  EXPECT_EQ(b1(*m), (u64s{2}));
  EXPECT_EQ(p(*m), 2.0);  // no adaptation on insert
}

// vLLM main's ARCCachePolicy.clear: T1, T2, B1, B2 emptied and the target back at 0.
TEST(ArcManagerTest, ResetClearsGhostsAndTarget) {
  auto m = make_arc(2);
  ps_cs(*m, {1, 2});
  t(*m, {2});  // 2 to T2
  EXPECT_EQ(ps(*m, {3}), (plan{{3}, {0}, {1}}));
  cs(*m, {3});
  t(*m, {1});  // a ghost hit: p grows
  ASSERT_EQ(b1(*m), (u64s{1}));
  ASSERT_EQ(p(*m), 1.0);
  m->reset();
  EXPECT_EQ(t1(*m), u64s{});
  EXPECT_EQ(t2(*m), u64s{});
  EXPECT_EQ(b1(*m), u64s{});
  EXPECT_EQ(b2(*m), u64s{});
  EXPECT_EQ(p(*m), 0.0);
  t(*m, {1});  // no longer a ghost: no adaptation
  EXPECT_EQ(p(*m), 0.0);
  ps_cs(*m, {1, 2});
  EXPECT_EQ(t1(*m), (u64s{1, 2}));
  EXPECT_EQ(ps(*m, {3}), (plan{{3}, {0}, {1}}));
  cs(*m, {3});
  EXPECT_EQ(b1(*m), (u64s{1}));  // ghosts are kept again after the reset
}

TEST(ArcManagerTest, TargetIsCappedAtCapacityAndFloorsAtZero) {
  auto m = make_arc(2);
  ps_cs(*m, {1, 2});
  ps_cs(*m, {3});
  for (int i = 0; i < 5; ++i) t(*m, {1});
  EXPECT_EQ(p(*m), 2.0);
  // Evict from T2 to get a B2 ghost: T1 = [3], T2 = [2], p = 2 > |T1| -> T2 victim.
  t(*m, {2});
  EXPECT_EQ(t2(*m), (u64s{2}));
  EXPECT_EQ(ps(*m, {4}), (plan{{4}, {1}, {2}}));
  EXPECT_EQ(b2(*m), (u64s{2}));
  t(*m, {2});  // B2 hit: p -= max(1, |B1|/|B2|) = 1
  EXPECT_EQ(p(*m), 1.0);
  t(*m, {2, 2});
  EXPECT_EQ(p(*m), 0.0);
}

// §9.7
TEST(ArcManagerTest, SourceChoiceFollowsTarget) {
  auto m = make_arc(4);
  ps_cs(*m, {7});
  ps_cs(*m, {1, 2, 3});
  t(*m, {3});
  EXPECT_EQ(ps(*m, {4}), (plan{{4}, {0}, {7}}));
  cs(*m, {4});
  t(*m, {4});
  t(*m, {7});
  ASSERT_EQ(t1(*m), (u64s{1, 2}));
  ASSERT_EQ(t2(*m), (u64s{3, 4}));
  ASSERT_EQ(p(*m), 1.0);

  EXPECT_EQ(ps(*m, {5}), (plan{{5}, {1}, {1}}));
  EXPECT_EQ(b1(*m), (u64s{7, 1}));
  EXPECT_EQ(t1(*m), (u64s{2, 5}));
  EXPECT_EQ(t2(*m), (u64s{3, 4}));
}

// §9.8
TEST(ArcManagerTest, GhostListsAreBoundedByCapacity) {
  auto m = make_arc(2);
  for (uint64_t i = 1; i <= 19; ++i) {
    ASSERT_TRUE(m->prepare_store(keys({i})));
    m->complete_store(keys({i}), true);
  }
  EXPECT_EQ(b1(*m), (u64s{16, 17}));
  EXPECT_EQ(t1(*m), (u64s{18, 19}));
  EXPECT_EQ(b2(*m), u64s{});
  EXPECT_EQ(t2(*m), u64s{});
}

// §9.9
TEST(ArcManagerTest, TouchOrderIsReversed) {
  auto m = make_arc(4);
  ps_cs(*m, {1, 2, 3, 4});
  t(*m, {3, 4});
  EXPECT_EQ(t2(*m), (u64s{4, 3}));
  t(*m, {1, 3, 4});
  EXPECT_EQ(t1(*m), (u64s{2}));
  EXPECT_EQ(t2(*m), (u64s{4, 3, 1}));  // reversed: 4, then 3, then 1 (promoted)
  EXPECT_EQ(ps(*m, {5}), (plan{{5}, {1}, {2}}));
}

// §9.10
TEST(ArcManagerTest, FailedStoreLeavesVictimGhost) {
  auto m = make_arc(4);
  ps_cs(*m, {1, 2, 3, 4});
  EXPECT_EQ(ps(*m, {5}), (plan{{5}, {0}, {1}}));
  cs(*m, {5}, /*ok=*/false);
  EXPECT_FALSE(lk(*m, 5));
  EXPECT_EQ(t1(*m), (u64s{2, 3, 4}));
  EXPECT_EQ(t2(*m), u64s{});
  EXPECT_EQ(b1(*m), (u64s{1}));
  EXPECT_EQ(m->free_slots(), 1u);
  EXPECT_EQ(events(*m), (std::vector<ev>{stored({1, 2, 3, 4}), removed({1})}));
}

// §9.11
TEST(ArcManagerTest, FullScenario) {
  auto m = make_arc(4);
  ps_cs(*m, {1, 2});
  EXPECT_EQ(ps(*m, {3, 4, 5}), (plan{{3, 4, 5}, {2, 3, 0}, {1}}));
  cs(*m, {3, 4, 5});
  t(*m, {2, 3});
  EXPECT_EQ(t1(*m), (u64s{4, 5}));
  EXPECT_EQ(t2(*m), (u64s{3, 2}));
  EXPECT_EQ(ps(*m, {6}), (plan{{6}, {3}, {4}}));
  cs(*m, {6});
  EXPECT_TRUE(lk(*m, 2));
  EXPECT_TRUE(lk(*m, 3));
}

// §9.13 (verified on R1)
TEST(ArcManagerTest, TouchingPendingBlocksDoesNotPromote) {
  auto m = make_arc(4);
  ASSERT_TRUE(ps(*m, {1, 2}));
  t(*m, {1, 2});
  EXPECT_EQ(t1(*m), (u64s{2, 1}));
  EXPECT_EQ(t2(*m), u64s{});
  cs(*m, {1, 2});
  t(*m, {1, 2});
  EXPECT_EQ(t1(*m), u64s{});
  EXPECT_EQ(t2(*m), (u64s{2, 1}));
}

// §9.14 (verified on R1): no fallback from T2 back to T1.
TEST(ArcManagerTest, NoFallbackFromT2ToT1) {
  auto m = make_arc(4);
  ps_cs(*m, {9});
  ps_cs(*m, {1, 2, 4});
  t(*m, {4});
  EXPECT_EQ(ps(*m, {3}), (plan{{3}, {0}, {9}}));
  cs(*m, {3});
  t(*m, {3});
  t(*m, {9});
  t(*m, {9});
  t(*m, {9});
  ASSERT_EQ(t1(*m), (u64s{1, 2}));
  ASSERT_EQ(t2(*m), (u64s{4, 3}));
  ASSERT_EQ(p(*m), 3.0);
  EXPECT_EQ(pl(*m, {3, 4}), (u32s{0, 3}));

  const snapshot before = snap(*m);
  EXPECT_EQ(ps(*m, {5}), std::nullopt);  // |T1| = 2 < int(p) = 3, T2 all loading
  EXPECT_EQ(snap(*m), before);

  cl(*m, {3, 4});
  EXPECT_EQ(ps(*m, {5}), (plan{{5}, {3}, {4}}));
  EXPECT_EQ(b2(*m), (u64s{4}));
  EXPECT_EQ(t2(*m), (u64s{3}));
  EXPECT_EQ(t1(*m), (u64s{1, 2, 5}));
}

TEST(ArcManagerTest, FractionalTargetIsTruncatedForSourceChoice) {
  // Build |B2| = 3, |B1| = 2, then a B1 hit adds 1.5.
  auto m = make_arc(3);
  ps_cs(*m, {1, 2, 3});
  t(*m, {1, 2, 3});  // all to T2
  ps_cs(*m, {4, 5, 6});  // |T1| = 0 >= int(0): T1 empty -> T2 victims 3, 2, 1... in T2 order
  EXPECT_EQ(b2(*m), (u64s{3, 2, 1}));
  EXPECT_EQ(t1(*m), (u64s{4, 5, 6}));
  ps_cs(*m, {7, 8});  // T1 victims 4, 5
  EXPECT_EQ(b1(*m), (u64s{4, 5}));
  t(*m, {4});
  EXPECT_EQ(p(*m), 1.5);
  EXPECT_EQ(b1(*m), (u64s{5, 4}));
  t(*m, {6, 7});  // T1 = [8], T2 = [7, 6]
  // v = |T1| = 1 >= int(1.5) = 1: the victim comes from T1 (8), not T2 (7).
  EXPECT_EQ(ps(*m, {10}), (plan{{10}, {0}, {8}}));
  EXPECT_EQ(b1(*m), (u64s{5, 4, 8}));
  t(*m, {3});  // B2 hit: p = max(1.5 - max(1, 3/3), 0) = 0.5
  EXPECT_EQ(p(*m), 0.5);
}

TEST(ArcManagerTest, GhostHitThenStoreReadmitsIntoT1) {
  auto m = make_arc(2);
  ps_cs(*m, {1, 2});
  ps_cs(*m, {3});
  ASSERT_EQ(b1(*m), (u64s{1}));
  ps_cs(*m, {1});  // stored again: leaves B1, enters T1 (not T2)
  EXPECT_EQ(b1(*m), (u64s{2}));
  EXPECT_EQ(t1(*m), (u64s{3, 1}));
  EXPECT_TRUE(lk(*m, 1));
}

}  // namespace
}  // namespace kvc::scheduler
