#include "actors/metrics/connection_gate.hpp"

#include <gtest/gtest.h>

namespace kvc::metrics {
namespace {

using namespace std::chrono_literals;
using head = connection_gate::head;

const connection_gate::time_point t0{};

gate_limits limits(size_t max_connections) {
  gate_limits l;
  l.max_connections = max_connections;
  l.max_head_bytes = 64;
  l.request_timeout = 200ms;
  return l;
}

TEST(ConnectionGateTest, AHeadIsCompleteAtItsBlankLineEvenWhenItArrivesInPieces) {
  connection_gate g(limits(4));
  ASSERT_TRUE(g.admit(7, t0, 0).admitted);
  EXPECT_EQ(g.append(7, "GET /metrics HTTP/1.1\r\nHost: x\r"), head::incomplete);
  EXPECT_EQ(g.append(7, "\n\r"), head::incomplete);
  EXPECT_EQ(g.append(7, "\nextra"), head::complete);
  auto r = g.dispatch(7);
  EXPECT_EQ(r.received, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nextra");
  EXPECT_EQ(r.deadline, t0 + 200ms);
  EXPECT_TRUE(g.waiting().empty());
}

TEST(ConnectionGateTest, BytesReceivedDoNotMoveTheDeadline) {
  connection_gate g(limits(4));
  ASSERT_TRUE(g.admit(3, t0, 0).admitted);
  EXPECT_EQ(g.next_deadline(), t0 + 200ms);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(g.append(3, "x"), head::incomplete);  // a byte at a time
  EXPECT_TRUE(g.expired(t0 + 199ms).empty());
  EXPECT_EQ(g.expired(t0 + 200ms), std::vector<int>{3});
  EXPECT_EQ(g.next_deadline(), t0 + 200ms);
  g.drop(3);
  EXPECT_FALSE(g.next_deadline());
}

TEST(ConnectionGateTest, AHeadLongerThanTheLimitIsTooLarge) {
  connection_gate g(limits(4));
  ASSERT_TRUE(g.admit(3, t0, 0).admitted);
  EXPECT_EQ(g.append(3, std::string(63, 'x')), head::incomplete);
  EXPECT_EQ(g.append(3, "x"), head::too_large);
  ASSERT_TRUE(g.admit(4, t0, 0).admitted);
  // The blank line past the limit does not make a head either.
  EXPECT_EQ(g.append(4, std::string(62, 'x') + "\r\n\r\n"), head::too_large);
}

TEST(ConnectionGateTest, AFullGateGivesTheOldestWaitingSlotToTheNewConnection) {
  connection_gate g(limits(3));
  EXPECT_FALSE(g.admit(1, t0, 0).evicted);
  EXPECT_FALSE(g.admit(2, t0 + 1ms, 0).evicted);
  EXPECT_FALSE(g.admit(3, t0 + 2ms, 0).evicted);
  auto a = g.admit(4, t0 + 3ms, 0);
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.evicted, 1);
  EXPECT_EQ(g.waiting(), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(g.next_deadline(), t0 + 1ms + 200ms);
}

TEST(ConnectionGateTest, ConnectionsBeingAnsweredCountAgainstTheCap) {
  connection_gate g(limits(2));
  ASSERT_TRUE(g.admit(1, t0, 0).admitted);
  EXPECT_EQ(g.append(1, "GET / HTTP/1.1\r\n\r\n"), head::complete);
  g.dispatch(1);
  // One answered, one waiting: the next takes the waiting one's slot.
  ASSERT_TRUE(g.admit(2, t0, 1).admitted);
  auto a = g.admit(3, t0, 1);
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.evicted, 2);
  EXPECT_EQ(g.append(3, "GET / HTTP/1.1\r\n\r\n"), head::complete);
  g.dispatch(3);
  // Every slot is being answered: refused, nothing evicted.
  a = g.admit(4, t0, 2);
  EXPECT_FALSE(a.admitted);
  EXPECT_FALSE(a.evicted);
  EXPECT_TRUE(g.waiting().empty());
}

}  // namespace
}  // namespace kvc::metrics
