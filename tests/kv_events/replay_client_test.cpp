#include "actors/kv_events/replay_client.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "actors/kv_events/batch_encoder.hpp"
#include "actors/kv_events/publisher.hpp"

namespace kvc::kv_events {
namespace {

using namespace std::chrono_literals;
using batches = std::vector<std::pair<uint64_t, std::string>>;

/// A replay endpoint played by the test: it takes the request and answers what the test says.
class FakeReplayEndpoint {
 public:
  FakeReplayEndpoint() {
    router_.set(zmq::sockopt::linger, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }
  const std::string& endpoint() const { return endpoint_; }

  /// Blocks until a request came; returns the requester's identity.
  std::string take_request() {
    std::vector<std::string> frames;
    zmq::message_t m;
    do {
      EXPECT_TRUE(router_.recv(m, zmq::recv_flags::none));
      frames.push_back(m.to_string());
    } while (m.more());
    EXPECT_EQ(frames.size(), 3u);
    return frames.front();
  }
  void send(const std::string& identity, const std::vector<std::string>& frames) {
    router_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    for (size_t i = 0; i < frames.size(); ++i) {
      router_.send(zmq::buffer(frames[i]),
                   i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  std::string endpoint_;
};

result<replay_outcome> fetch(zmq::context_t& ctx, replay_request r, batches& got) {
  return fetch_replay(ctx, r, [&](uint64_t seq, std::string_view payload) {
    got.emplace_back(seq, std::string{payload});
  });
}

TEST(ReplayClientTest, FetchesThePublishersKeptBatchesFromTheAskedSequence) {
  publisher_options o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  auto pub = publisher::start(o);
  ASSERT_TRUE(pub.ok()) << pub.error().to_string();
  for (const char* p : {"a", "b", "c"}) (*pub)->publish(p);
  zmq::context_t ctx{1};
  batches got;
  auto r = fetch(ctx, {(*pub)->replay_endpoint(), 1, 60s, -1}, got);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, replay_outcome::complete);
  EXPECT_EQ(got, (batches{{1, "b"}, {2, "c"}}));
}

TEST(ReplayClientTest, AnEndpointThatNeverAnswersIsATimeout) {
  FakeReplayEndpoint fake;
  zmq::context_t ctx{1};
  batches got;
  auto r = fetch(ctx, {fake.endpoint(), 0, 50ms, -1}, got);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::timeout);
  EXPECT_NE(r.error().message().find("no end marker"), std::string::npos) << r.error().message();
  fake.take_request();  // the request did go out
}

TEST(ReplayClientTest, AnAnswerWithoutTheEndMarkerIsATimeoutAfterItsBatches) {
  FakeReplayEndpoint fake;
  zmq::context_t ctx{1};
  batches got;
  result<replay_outcome> r = make_error(errc::internal, "not run");
  std::thread client([&] { r = fetch(ctx, {fake.endpoint(), 7, 50ms, -1}, got); });
  const std::string id = fake.take_request();
  fake.send(id, {"", sequence_bytes(7), "x"});
  client.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::timeout);
  EXPECT_NE(r.error().message().find("after 1 batches"), std::string::npos) << r.error().message();
  EXPECT_EQ(got, (batches{{7, "x"}}));
}

TEST(ReplayClientTest, AMalformedAnswerIsAnError) {
  FakeReplayEndpoint fake;
  zmq::context_t ctx{1};
  batches got;
  result<replay_outcome> r = make_error(errc::internal, "not run");
  std::thread client([&] { r = fetch(ctx, {fake.endpoint(), 0, 60s, -1}, got); });
  fake.send(fake.take_request(), {"", "short"});
  client.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.code(), errc::invalid_argument);
  EXPECT_TRUE(got.empty());
}

TEST(ReplayClientTest, AReadableStopDescriptorEndsTheWait) {
  FakeReplayEndpoint fake;  // never answers
  const int stop = ::eventfd(1, EFD_CLOEXEC);
  ASSERT_GE(stop, 0);
  zmq::context_t ctx{1};
  batches got;
  auto r = fetch(ctx, {fake.endpoint(), 0, 3600s, stop}, got);
  ::close(stop);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(*r, replay_outcome::stopped);
}

TEST(ReplayClientTest, AnEndpointZeroMqCannotUseIsAnIoError) {
  zmq::context_t ctx{1};
  batches got;
  EXPECT_EQ(fetch(ctx, {"nonsense", 0, 50ms, -1}, got).code(), errc::io_error);
}

}  // namespace
}  // namespace kvc::kv_events
