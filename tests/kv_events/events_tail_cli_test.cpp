// `kvconnect events tail --replay` as a user runs it, against a publisher played by the test (an
// XPUB socket, which tells when the subscription arrived, and a ROUTER replay endpoint that
// answers what the test says): a gap is filled, a replay endpoint that stays silent ends the
// command with exit 1 after --replay-timeout-ms, and the first SIGINT ends it while it waits.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "actors/kv_events/batch_encoder.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::kv_events {
namespace {

using namespace std::chrono_literals;
using testing::child_process;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 20s;

class EventsTailCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (auto* s : {&pub_, &router_}) {
      s->set(zmq::sockopt::linger, 0);
      s->bind("tcp://127.0.0.1:*");
    }
  }

  /// Starts `events tail` on the test's sockets and waits until its subscription arrived.
  void start(std::vector<std::string> extra) {
    std::vector<std::string> argv{KVC_BINARY,     "events",   "tail",
                                  endpoint(pub_), "--replay", endpoint(router_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = child_process::start(argv);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    tail_ = std::move(c).value();
    auto subscription = recv(pub_);
    ASSERT_EQ(subscription.size(), 1u);
    ASSERT_EQ(subscription[0], std::string(1, '\x01'));  // subscribe to every topic
  }

  void publish(uint64_t seq) {
    pub_.send(zmq::message_t{}, zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(sequence_bytes(seq)), zmq::send_flags::sndmore);
    pub_.send(zmq::buffer(encode_cleared(1.5, {})), zmq::send_flags::none);
  }

  /// The replay request's frames: [identity, empty, start seq].
  std::vector<std::string> take_replay_request() { return recv(router_); }

  void answer(const std::string& identity, const std::string& seq, const std::string& payload) {
    router_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    router_.send(zmq::message_t{}, zmq::send_flags::sndmore);
    router_.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(payload), zmq::send_flags::none);
  }

  int exit_code() {
    auto code = tail_.wait_exit(patience);
    EXPECT_TRUE(code.ok()) << "events tail still runs: " << tail_.stderr_text();
    return code.ok() ? *code : -1;
  }

  static std::string endpoint(zmq::socket_t& s) { return s.get(zmq::sockopt::last_endpoint); }

  /// One message, waited for up to `patience`.
  static std::vector<std::string> recv(zmq::socket_t& s) {
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    std::vector<std::string> frames;
    if (zmq::poll(&item, 1, patience) == 0) {
      ADD_FAILURE() << "no message within the safety net";
      return frames;
    }
    zmq::message_t m;
    do {
      EXPECT_TRUE(s.recv(m, zmq::recv_flags::none));
      frames.push_back(m.to_string());
    } while (m.more());
    return frames;
  }

  zmq::context_t ctx_{1};
  zmq::socket_t pub_{ctx_, zmq::socket_type::xpub};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  child_process tail_;
};

TEST_F(EventsTailCliTest, AGapIsFilledFromTheReplayEndpointInOrder) {
  ASSERT_NO_FATAL_FAILURE(start({"--count", "4"}));
  publish(0);
  publish(3);
  auto request = take_replay_request();
  ASSERT_EQ(request.size(), 3u);
  EXPECT_EQ(request[2], sequence_bytes(1));
  for (uint64_t seq : {0, 1, 2}) answer(request[0], sequence_bytes(seq), encode_cleared(2.5, {}));
  answer(request[0], end_of_replay(), "");
  EXPECT_EQ(exit_code(), 0) << tail_.stderr_text();
  const std::string& out = tail_.stdout_text();
  std::vector<size_t> at;
  for (const char* seq : {"\"seq\":0,", "\"seq\":1,", "\"seq\":2,", "\"seq\":3,"}) {
    at.push_back(out.find(seq));
    ASSERT_NE(at.back(), std::string::npos) << seq << " missing: " << out;
    EXPECT_EQ(at.back(), out.rfind(seq)) << seq << " printed twice: " << out;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << out;
}

TEST_F(EventsTailCliTest, ASilentReplayEndpointEndsTheCommandWithExit1) {
  ASSERT_NO_FATAL_FAILURE(start({"--replay-timeout-ms", "100"}));
  publish(0);
  publish(5);
  ASSERT_EQ(take_replay_request().size(), 3u);  // asked, and never answered
  EXPECT_EQ(exit_code(), 1);
  EXPECT_THAT(tail_.stderr_text(), HasSubstr("batches 1..4 not recovered"));
  EXPECT_THAT(tail_.stderr_text(), HasSubstr("no end marker"));
}

TEST_F(EventsTailCliTest, TheFirstSigintEndsTheWaitForAReplay) {
  ASSERT_NO_FATAL_FAILURE(start({}));  // the default replay timeout, 5 s, would end it with 1
  publish(0);
  publish(5);
  ASSERT_EQ(take_replay_request().size(), 3u);  // the command now waits for the answer
  ASSERT_TRUE(tail_.signal(SIGINT).ok());
  EXPECT_EQ(exit_code(), 0) << tail_.stderr_text();  // 130 would be the second signal's exit
}

TEST_F(EventsTailCliTest, TheFirstSigintEndsTheWaitForABatch) {
  ASSERT_NO_FATAL_FAILURE(start({}));
  ASSERT_TRUE(tail_.signal(SIGINT).ok());
  EXPECT_EQ(exit_code(), 0) << tail_.stderr_text();
}

}  // namespace
}  // namespace kvc::kv_events
