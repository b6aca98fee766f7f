// The simulated engine's executor channel: a model input survives encoding, a malformed message
// is refused, and a subscriber gets what the publisher sends once it is counted as subscribed
// (waits are on messages, with deadlines).
#include "launch/sim_engine/executor_channel.hpp"

#include <gtest/gtest.h>

namespace kvc::sim {
namespace {

using namespace std::chrono_literals;

executor_message sample() {
  executor_message m;
  m.input.step = 42;
  m.input.writes = {{3, 0, 0xdeadbeefcafef00dull}, {3, 1, 7}};
  m.input.loads = {{"c1.t0", {5, 6}, {1, 2, 3, 4}}};
  return m;
}

TEST(ExecutorChannelTest, AMessageSurvivesEncodingAndGarbageIsRefused) {
  const auto m = sample();
  auto back = decode(encode(m));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_FALSE(back->end);
  EXPECT_EQ(back->input, m.input);
  auto end = decode(encode({true, {}}));
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(end->end);
  EXPECT_EQ(decode("not msgpack").code(), errc::protocol_mismatch);
  EXPECT_EQ(decode(std::string("\x81\xa3"
                               "end\xc3",
                               6))
                .code(),
            errc::protocol_mismatch);
}

TEST(ExecutorChannelTest, ASubscribedWorkerGetsEveryStepInOrder) {
  auto pub = executor_publisher::create("127.0.0.1");
  ASSERT_TRUE(pub.ok()) << pub.error().to_string();
  EXPECT_EQ((*pub)->wait_for_subscribers(1, 0ms).code(), errc::timeout);
  auto sub = executor_subscriber::connect((*pub)->endpoint());
  ASSERT_TRUE(sub.ok()) << sub.error().to_string();
  ASSERT_TRUE((*pub)->wait_for_subscribers(1, 10s).ok());
  auto m = sample();
  ASSERT_TRUE((*pub)->publish(m).ok());
  m.input.step = 43;
  ASSERT_TRUE((*pub)->publish(m).ok());
  ASSERT_TRUE((*pub)->publish({true, {}}).ok());
  for (step_id want : {42, 43}) {
    auto got = (*sub)->receive(10s);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->input.step, want);
  }
  auto last = (*sub)->receive(10s);
  ASSERT_TRUE(last.ok() && last->has_value());
  EXPECT_TRUE((*last)->end);
}

}  // namespace
}  // namespace kvc::sim
