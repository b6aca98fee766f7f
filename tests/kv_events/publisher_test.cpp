#include "actors/kv_events/publisher.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "actors/kv_events/batch_encoder.hpp"

namespace kvc::kv_events {
namespace {

std::vector<std::string> recv_all(zmq::socket_t& s) {
  std::vector<std::string> frames;
  zmq::message_t m;
  do {
    EXPECT_TRUE(s.recv(m, zmq::recv_flags::none));
    frames.push_back(m.to_string());
  } while (m.more());
  return frames;
}

uint64_t seq_of(const std::string& b) {
  uint64_t v = 0;
  for (unsigned char c : b) v = (v << 8) | c;
  return v;
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    publisher_options o;
    o.endpoint = "tcp://127.0.0.1:*";
    o.replay_endpoint = "tcp://127.0.0.1:*";
    o.topic = "kv";
    o.buffer = 4;
    auto p = publisher::start(o);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    pub_ = std::move(p).value();
  }

  /// Replays from `start`: the (seq, payload) pairs up to the end marker.
  std::vector<std::pair<uint64_t, std::string>> replay(uint64_t start) {
    zmq::socket_t dealer(ctx_, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(pub_->replay_endpoint());
    dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(sequence_bytes(start)), zmq::send_flags::none);
    std::vector<std::pair<uint64_t, std::string>> out;
    for (;;) {
      auto f = recv_all(dealer);
      EXPECT_EQ(f.size(), 3u);
      EXPECT_TRUE(f[0].empty());
      if (f[1] == end_of_replay()) {
        EXPECT_TRUE(f[2].empty());
        return out;
      }
      out.emplace_back(seq_of(f[1]), f[2]);
    }
  }

  zmq::context_t ctx_{1};
  std::unique_ptr<publisher> pub_;
};

TEST_F(PublisherTest, BindsRealPorts) {
  EXPECT_TRUE(pub_->endpoint().starts_with("tcp://127.0.0.1:"));
  EXPECT_NE(pub_->endpoint(), "tcp://127.0.0.1:*");
  EXPECT_NE(pub_->endpoint(), pub_->replay_endpoint());
}

TEST_F(PublisherTest, ReplayServesTheKeptBatchesFromTheAskedSequence) {
  for (int i = 0; i < 6; ++i) pub_->publish("batch" + std::to_string(i));
  // buffer = 4: batches 2..5 are kept
  auto all = replay(0);
  ASSERT_EQ(all.size(), 4u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].first, i + 2);
    EXPECT_EQ(all[i].second, "batch" + std::to_string(i + 2));
  }
  auto tail = replay(4);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0].first, 4u);
  EXPECT_TRUE(replay(6).empty());
  EXPECT_EQ(pub_->published(), 6u);
}

TEST_F(PublisherTest, MalformedReplayRequestGetsOnlyTheEndMarker) {
  pub_->publish("x");
  zmq::socket_t dealer(ctx_, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(pub_->replay_endpoint());
  dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(std::string("abc")), zmq::send_flags::none);  // not 8 bytes
  auto f = recv_all(dealer);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[1], end_of_replay());
  EXPECT_EQ(replay(0).size(), 1u);  // the publisher goes on
}

TEST_F(PublisherTest, SubscriberGetsTopicSequenceAndPayloadInOrder) {
  zmq::socket_t sub(ctx_, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.connect(pub_->endpoint());
  // A subscription reaches a PUB socket asynchronously (ZeroMQ's slow joiner): probe batches
  // until the first arrives; what it missed is what the replay endpoint is for.
  std::vector<std::string> first;
  for (;;) {
    pub_->publish("probe");
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds{50}) > 0) {
      first = recv_all(sub);
      break;
    }
  }
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0], "kv");
  EXPECT_EQ(first[2], "probe");
  const uint64_t k = seq_of(first[1]);
  pub_->publish("a");
  pub_->publish("b");
  // Probes may still be on the way before "a": skip them, then a and b follow in order.
  std::vector<std::string> f;
  do {
    f = recv_all(sub);
  } while (f[2] == "probe");
  EXPECT_EQ(f[2], "a");
  const uint64_t seq_a = seq_of(f[1]);
  EXPECT_GT(seq_a, k);
  f = recv_all(sub);
  EXPECT_EQ(f[2], "b");
  EXPECT_EQ(seq_of(f[1]), seq_a + 1);
}

// ZeroMQ's default send high-water mark (1,000 messages per peer) once cut every longer answer
// short, silently and without the end marker. Here the answer of 2,000 batches of 16 KiB is
// complete although the peer reads nothing while it is sent: the peer reads one message (the
// publisher is then inside its answer), then a second replay on another socket is answered in
// full, which the publisher's single thread does only after the first answer was queued; only
// then is the first answer read. The reader keeps almost nothing in flight (receive queue of 1
// message, small socket buffer), so before the fix most of the answer was dropped.
TEST(PublisherReplayTest, AnswersMoreThanAThousandBatchesWithTheEndMarker) {
  constexpr size_t kept = 2000;
  publisher_options o;
  o.endpoint = "tcp://127.0.0.1:*";
  o.replay_endpoint = "tcp://127.0.0.1:*";
  o.buffer = kept;
  auto started = publisher::start(o);
  ASSERT_TRUE(started.ok()) << started.error().to_string();
  auto pub = std::move(started).value();
  for (size_t i = 0; i < kept; ++i) {
    std::string payload(16 * 1024, static_cast<char>('a' + i % 26));
    payload.replace(0, std::to_string(i).size(), std::to_string(i));
    pub->publish(std::move(payload));
  }
  zmq::context_t ctx{1};
  auto ask = [&](zmq::socket_t& dealer) {
    dealer.set(zmq::sockopt::linger, 0);
    dealer.set(zmq::sockopt::rcvhwm, 1);
    dealer.set(zmq::sockopt::rcvbuf, 4096);
    dealer.connect(pub->replay_endpoint());
    dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(sequence_bytes(0)), zmq::send_flags::none);
  };
  // Reads the answer to its end marker; the sequence numbers it carried.
  auto read_answer = [](zmq::socket_t& dealer, std::vector<uint64_t>& seqs) {
    for (;;) {
      auto f = recv_all(dealer);
      if (f.size() != 3u) return ::testing::AssertionFailure() << f.size() << " frames";
      if (f[1] == end_of_replay()) {
        if (!f[2].empty()) return ::testing::AssertionFailure() << "end marker with a payload";
        return ::testing::AssertionSuccess();
      }
      const uint64_t seq = seq_of(f[1]);
      if (!f[2].starts_with(std::to_string(seq))) {
        return ::testing::AssertionFailure() << "batch " << seq << " carries another payload";
      }
      seqs.push_back(seq);
    }
  };
  zmq::socket_t first(ctx, zmq::socket_type::dealer);
  ask(first);
  auto head = recv_all(first);
  ASSERT_EQ(head.size(), 3u);
  std::vector<uint64_t> seqs{seq_of(head[1])};

  zmq::socket_t second(ctx, zmq::socket_type::dealer);
  ask(second);
  std::vector<uint64_t> second_seqs;
  ASSERT_TRUE(read_answer(second, second_seqs));
  EXPECT_EQ(second_seqs.size(), kept);

  ASSERT_TRUE(read_answer(first, seqs));
  ASSERT_EQ(seqs.size(), kept);
  for (size_t i = 0; i < kept; ++i) ASSERT_EQ(seqs[i], i);
}

TEST(PublisherStartTest, BadEndpointsAreErrors) {
  publisher_options o;
  o.endpoint = "nonsense";
  EXPECT_EQ(publisher::start(o).error().code(), errc::io_error);
  o.endpoint = "tcp://127.0.0.1:*";
  o.buffer = 0;
  EXPECT_EQ(publisher::start(o).error().code(), errc::invalid_argument);
  o.buffer = 1;
  o.replay_endpoint = "bad";
  EXPECT_EQ(publisher::start(o).error().code(), errc::io_error);
}

}  // namespace
}  // namespace kvc::kv_events
