// The simulated engine's executor channel: a model input survives encoding, a malformed message
// is refused, and a subscriber gets what the publisher sends once it is counted as subscribed
// (waits are on messages, with deadlines); a subscriber without the token is refused in
// ZeroMQ's handshake: not counted, no model input.
#include "launch/engines/sim/executor_channel.hpp"

#include <cstring>

#include <gtest/gtest.h>
#include <zmq.hpp>

namespace kvc::sim {
namespace {

using namespace std::chrono_literals;

const std::string token = "executor-test-token";

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
  auto pub = executor_publisher::create("127.0.0.1", 0, token);
  ASSERT_TRUE(pub.ok()) << pub.error().to_string();
  EXPECT_EQ((*pub)->wait_for_subscribers(1, 0ms).code(), errc::timeout);
  auto sub = executor_subscriber::connect((*pub)->endpoint(), token);
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

/// Waits (up to 10 s) for `event` among the events of the monitor socket `mon`.
bool saw_event(zmq::socket_t& mon, uint16_t event) {
  for (;;) {
    zmq::pollitem_t item{mon.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 10s) == 0) return false;
    zmq::message_t head;
    zmq::message_t address;
    if (!mon.recv(head) || !mon.recv(address)) return false;
    uint16_t got = 0;
    std::memcpy(&got, head.data(), sizeof got);
    if (got == event) return true;
  }
}

TEST(ExecutorChannelTest, ASubscriberWithoutTheTokenIsNotCountedAndGetsNothing) {
  auto pub = executor_publisher::create("127.0.0.1", 0, token);
  ASSERT_TRUE(pub.ok()) << pub.error().to_string();
  // A SUB with a wrong password: its handshake fails (seen on its own socket's monitor).
  zmq::context_t ctx{1};
  zmq::socket_t bad{ctx, zmq::socket_type::sub};
  bad.set(zmq::sockopt::plain_username, "kvc");
  bad.set(zmq::sockopt::plain_password, "not-the-token");
  bad.set(zmq::sockopt::subscribe, "");
  bad.set(zmq::sockopt::linger, 0);
  ASSERT_EQ(zmq_socket_monitor(bad.handle(), "inproc://bad-sub-monitor",
                               ZMQ_EVENT_HANDSHAKE_FAILED_AUTH),
            0);
  zmq::socket_t mon{ctx, zmq::socket_type::pair};
  mon.set(zmq::sockopt::linger, 0);
  mon.connect("inproc://bad-sub-monitor");
  bad.connect((*pub)->endpoint());
  ASSERT_TRUE(saw_event(mon, ZMQ_EVENT_HANDSHAKE_FAILED_AUTH));
  EXPECT_GE((*pub)->refused_handshakes(), 1u);
  // Refused: its subscription was never counted.
  EXPECT_EQ((*pub)->wait_for_subscribers(1, 0ms).code(), errc::timeout);
  // One with the token is counted, and alone: a second subscriber is still missing.
  auto good = executor_subscriber::connect((*pub)->endpoint(), token);
  ASSERT_TRUE(good.ok()) << good.error().to_string();
  ASSERT_TRUE((*pub)->wait_for_subscribers(1, 10s).ok());
  EXPECT_EQ((*pub)->wait_for_subscribers(2, 0ms).code(), errc::timeout);
  ASSERT_TRUE((*pub)->publish(sample()).ok());
  ASSERT_TRUE((*pub)->publish({true, {}}).ok());
  for (bool end : {false, true}) {
    auto got = (*good)->receive(10s);
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->end, end);
  }
  // Everything published reached the subscriber with the token; none of it the other.
  zmq::message_t m;
  EXPECT_FALSE(bad.recv(m, zmq::recv_flags::dontwait).has_value());
  zmq_socket_monitor(bad.handle(), nullptr, 0);
}

TEST(ExecutorChannelTest, ABadTokenIsRefusedAtBothEnds) {
  EXPECT_EQ(executor_publisher::create("127.0.0.1", 0, "").code(), errc::invalid_argument);
  EXPECT_EQ(executor_subscriber::connect("tcp://127.0.0.1:1", std::string(256, 'x')).code(),
            errc::invalid_argument);
}

TEST(ExecutorChannelTest, APortInUseIsOneClearError) {
  auto first = executor_publisher::create("127.0.0.1", 0, token);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  const std::string ep = (*first)->endpoint();
  const auto port = static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1)));
  auto second = executor_publisher::create("127.0.0.1", port, token);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.code(), errc::io_error);
  EXPECT_NE(second.error().message().find(":" + std::to_string(port)), std::string::npos)
      << second.error().message();
}

}  // namespace
}  // namespace kvc::sim
