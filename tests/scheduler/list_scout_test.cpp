// list_scout: where the scout walks, and when it restarts at the front.
#include "actors/scheduler/list_scout.hpp"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "actors/scheduler/block_node.hpp"
#include "actors/scheduler/index_list.hpp"

namespace kvc::scheduler {
namespace {

using scout = list_scout<block_node>;

/// A list of nodes 0 .. n-1 in that order (node n is the sentinel); fetch() records each node
/// the scout reaches; `dead` nodes are not valid.
struct scouted_list {
  explicit scouted_list(uint32_t n) : nodes(n + 1), list(nodes.data(), n), dead(n + 1, false) {
    for (uint32_t i = 0; i < n; ++i) list.push_back(i);
  }
  void step(scout& s, uint32_t times = 1) {
    for (uint32_t t = 0; t < times; ++t)
      s.step(
          nodes.data(), list, [this](uint32_t id) { return !dead[id]; },
          [this](uint32_t id) { fetched.push_back(id); });
  }
  std::vector<block_node> nodes;
  index_list<block_node> list;
  std::vector<bool> dead;
  std::vector<uint32_t> fetched;
};

TEST(ListScoutTest, WalksFromTheFrontUpToItsLead) {
  scouted_list l(200);
  scout s;
  l.step(s, 150);
  ASSERT_EQ(l.fetched.size(), scout::max_lead);
  for (uint32_t i = 0; i < scout::max_lead; ++i) EXPECT_EQ(l.fetched[i], i);
  EXPECT_EQ(s.at(), scout::max_lead);  // where the next step would go on
}

TEST(ListScoutTest, ConsumedNodesLetItRunOn) {
  scouted_list l(200);
  scout s;
  l.step(s, 10);
  // A walk takes the first 4 nodes without reaching the scout: it goes on from node 10.
  for (uint32_t i = 0; i < 4; ++i) l.list.erase(i);
  s.consumed(4, false);
  l.step(s);
  EXPECT_EQ(l.fetched.back(), 10u);
}

TEST(ListScoutTest, AWalkThatMeetsItRestartsItAtTheFront) {
  scouted_list l(50);
  scout s;
  l.step(s, 5);
  for (uint32_t i = 0; i < 7; ++i) l.list.erase(i);
  s.consumed(7, true);
  EXPECT_EQ(s.at(), scout::npos);
  l.step(s);
  EXPECT_EQ(l.fetched.back(), 7u);  // the new front
}

TEST(ListScoutTest, ANodeMovedAwayOrInvalidRestartsIt) {
  scouted_list l(50);
  scout s;
  l.step(s, 3);
  ASSERT_EQ(s.at(), 3u);
  l.list.move_to_back(3);
  s.moved(3);
  l.step(s);
  EXPECT_EQ(l.fetched.back(), 0u);  // restarted: the list was not consumed

  l.step(s, 3);
  const uint32_t at = s.at();
  l.dead[at] = true;  // e.g. its slot was freed
  l.step(s);
  EXPECT_EQ(l.fetched.back(), 0u);
}

TEST(ListScoutTest, ReachingTheRecentEndRestartsIt) {
  scouted_list l(3);
  scout s;
  l.step(s, 3);
  EXPECT_EQ(s.at(), l.list.end());
  l.step(s);
  EXPECT_EQ(l.fetched.back(), 0u);
}

TEST(ListScoutTest, AnEmptyListIsNoStep) {
  scouted_list l(0);
  scout s;
  l.step(s);
  EXPECT_TRUE(l.fetched.empty());
  EXPECT_EQ(s.at(), scout::npos);
}

}  // namespace
}  // namespace kvc::scheduler
