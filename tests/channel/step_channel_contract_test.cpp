// Contract suite of the step channel: scheduler_channel and rank_channel over every transport
// (ZeroMQ over tcp, ZeroMQ inproc, in-process memory queues), over two of them behind the
// message traces' recording decorators (actors/trace/traced_transport.hpp) and over two behind
// the fault seam (faulty_server_transport.hpp) with an empty fault plan: the decorators must
// change nothing. Written once; each transport must pass it unchanged. Waits are for frames,
// each with a deadline; nothing sleeps.
#include "actors/channel/rank_channel.hpp"
#include "actors/channel/scheduler_channel.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "actors/channel/faulty_server_transport.hpp"
#include "actors/channel/memory_transport.hpp"
#include "actors/channel/zmq_transport.hpp"
#include "actors/trace/traced_transport.hpp"

namespace kvc::channel {
namespace {

using namespace std::chrono_literals;

constexpr auto patience = 5000ms;  // a frame in flight arrives well within this

enum class kind {
  zmq_tcp,
  zmq_inproc,
  memory,
  traced_zmq_tcp,
  traced_memory,
  faulty_zmq_tcp,
  faulty_memory
};

bool traced(kind k) {
  return k == kind::traced_zmq_tcp || k == kind::traced_memory;
}

bool faulty(kind k) {
  return k == kind::faulty_zmq_tcp || k == kind::faulty_memory;
}

bool tcp(kind k) {
  return k == kind::zmq_tcp || k == kind::traced_zmq_tcp || k == kind::faulty_zmq_tcp;
}

bool memory(kind k) {
  return k == kind::memory || k == kind::traced_memory || k == kind::faulty_memory;
}

/// Counts what the decorators record (the records themselves are tested in tests/trace).
class counting_sink final : public trace::trace_sink {
 public:
  void write(const trace::trace_record&) override { ++count; }
  std::atomic<uint64_t> count{0};
};

std::string name_of(const ::testing::TestParamInfo<kind>& info) {
  switch (info.param) {
    case kind::zmq_tcp:
      return "zmq_tcp";
    case kind::zmq_inproc:
      return "zmq_inproc";
    case kind::memory:
      return "memory";
    case kind::traced_zmq_tcp:
      return "traced_zmq_tcp";
    case kind::traced_memory:
      return "traced_memory";
    case kind::faulty_zmq_tcp:
      return "faulty_zmq_tcp";
    case kind::faulty_memory:
      return "faulty_memory";
  }
  return "unknown";
}

connector_metadata step(step_id s) {
  connector_metadata m;
  m.step = s;
  m.loads.push_back({.id = s * 10,
                     .request_id = "req",
                     .kind = transfer_kind::load,
                     .slots = {1, 2},
                     .gpu_blocks = {3, 4},
                     .skip = 0,
                     .group_sizes = {16},
                     .block_indices = {0}});
  return m;
}

step_report report(rank_id rank, uint32_t incarnation, step_id s) {
  step_report r{rank, incarnation, s, {}};
  r.events.push_back({.rank = rank,
                      .incarnation = incarnation,
                      .seq = 0,
                      .step = s,
                      .job = s * 10,
                      .kind = transfer_kind::load,
                      .ok = true,
                      .bytes = 64});
  return r;
}

class StepChannelContract : public ::testing::TestWithParam<kind> {
 protected:
  void SetUp() override { ASSERT_TRUE(open(4)); }

  /// With an empty fault plan the fault seam fired nothing and holds nothing back.
  void TearDown() override {
    if (faults_ == nullptr || sched_ == nullptr) return;  // gone with the channel
    for (uint64_t n : faults_->fired()) EXPECT_EQ(n, 0u);
    EXPECT_EQ(faults_->held_frames(), 0u);
  }

  ::testing::AssertionResult open(uint32_t world) {
    std::unique_ptr<server_transport> t;
    if (memory(GetParam())) {
      t = std::make_unique<memory_server>();
    } else {
      auto z = zmq_server::create(tcp(GetParam()) ? "127.0.0.1" : "", "token");
      if (!z) return ::testing::AssertionFailure() << z.error().to_string();
      t = std::move(z).value();
    }
    if (traced(GetParam())) {
      t = std::make_unique<trace::traced_server_transport>(std::move(t), tracer_);
    }
    faults_ = nullptr;
    if (faulty(GetParam())) {
      auto f = faulty_server_transport::make(std::move(t), fault_config{});
      if (!f) return ::testing::AssertionFailure() << f.error().to_string();
      faults_ = f->get();
      t = std::move(f).value();
    }
    auto ch = scheduler_channel::create(std::move(t), world, "token");
    if (!ch) return ::testing::AssertionFailure() << ch.error().to_string();
    sched_ = std::move(ch).value();
    return ::testing::AssertionSuccess();
  }

  /// A raw connection known as the routing id of (rank, incarnation). Over tcp it passes the
  /// transport's own handshake (zmq_auth_test.cpp tests that one); the hello is the channel's.
  std::unique_ptr<client_transport> connect_raw(rank_id rank, uint32_t incarnation) {
    const std::string peer = peer_id(rank, incarnation);
    auto c = tcp(GetParam()) ? zmq_connect(sched_->transport().remote_endpoint(), peer, "token")
                             : sched_->transport().connect_local(peer);
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    if (!c) return nullptr;
    if (!traced(GetParam())) return std::move(c).value();
    return std::make_unique<trace::traced_client_transport>(std::move(c).value(), tracer_, peer,
                                                            trace::rank_track(rank));
  }

  std::unique_ptr<rank_channel> connect(rank_id rank, uint32_t incarnation,
                                        const std::string& token = "token") {
    auto ch = rank_channel::open(connect_raw(rank, incarnation), {rank, incarnation, token});
    EXPECT_TRUE(ch.ok()) << ch.error().to_string();
    return ch ? std::move(ch).value() : nullptr;
  }

  /// Handles frames until `n` more have arrived; fails when one does not come within patience.
  ::testing::AssertionResult handle(size_t n) {
    for (size_t got = 0; got < n;) {
      const size_t k = sched_->receive(patience, reports_);
      if (k == 0) return ::testing::AssertionFailure() << got << " of " << n << " frames came";
      got += k;
    }
    return ::testing::AssertionSuccess();
  }

  std::optional<connector_metadata> next(rank_channel& rc) {
    auto m = rc.next_step(patience);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m ? *m : std::nullopt;
  }

  /// No frame is waiting at the rank (a step that was not sent to it).
  void expect_nothing(rank_channel& rc) {
    // The steps under test were sent before a later step that did arrive, so with in-order
    // delivery nothing earlier can still be on its way.
    auto m = rc.next_step(0ms);
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(m->has_value()) << "unexpected step " << (*m)->step;
  }

  std::shared_ptr<counting_sink> sink_ = std::make_shared<counting_sink>();
  std::shared_ptr<trace::tracer> tracer_ =
      std::make_shared<trace::tracer>(trace::trace_level::messages, sink_, "test", 0);
  std::unique_ptr<scheduler_channel> sched_;
  faulty_server_transport* faults_ = nullptr;  // sched_'s fault seam (faulty kinds only)
  std::vector<step_report> reports_;
};

TEST_P(StepChannelContract, EveryRankGetsEveryStepInOrderAndEachReportComesBackOnce) {
  std::vector<std::unique_ptr<rank_channel>> ranks;
  for (rank_id r = 0; r < 4; ++r) {
    sched_->rank_up(r, 0);
    ranks.push_back(connect(r, 0));
  }
  ASSERT_TRUE(handle(4));  // the hellos
  EXPECT_EQ(sched_->routed_ranks(), 4u);
  for (step_id s = 1; s <= 3; ++s) sched_->send_step(step(s));
  for (rank_id r = 0; r < 4; ++r) {
    for (step_id s = 1; s <= 3; ++s) {
      auto m = next(*ranks[r]);
      ASSERT_TRUE(m.has_value());
      EXPECT_EQ(*m, step(s));
      ASSERT_TRUE(ranks[r]->send_report(report(r, 0, s)).ok());
    }
  }
  ASSERT_TRUE(handle(12));
  ASSERT_EQ(reports_.size(), 12u);
  std::vector<step_id> last(4, 0);
  for (const auto& rep : reports_) {
    EXPECT_EQ(rep, report(rep.rank, 0, rep.step));
    EXPECT_EQ(rep.step, last[rep.rank] + 1) << "rank " << rep.rank;  // in order, each once
    last[rep.rank] = rep.step;
  }
  EXPECT_EQ(sched_->dropped_frames(), 0u);
}

TEST_P(StepChannelContract, StepsPlannedBeforeTheHelloAreQueuedAndSentOnIt) {
  sched_->rank_up(2, 0);
  sched_->send_step(step(1));
  sched_->send_step(step(2));
  EXPECT_EQ(sched_->dropped_frames(), 0u);
  auto rc = connect(2, 0);
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(next(*rc), step(1));
  EXPECT_EQ(next(*rc), step(2));
}

TEST_P(StepChannelContract, AHelloBeforeItsRegistrationWaitsForIt) {
  auto rc = connect(1, 0);
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(sched_->routed_ranks(), 0u);
  sched_->send_step(step(1));  // the rank is not registered: not for it
  sched_->rank_up(1, 0);
  EXPECT_EQ(sched_->routed_ranks(), 1u);
  sched_->send_step(step(2));
  EXPECT_EQ(next(*rc), step(2));
  expect_nothing(*rc);
}

TEST_P(StepChannelContract, AHelloWithAWrongTokenIsDroppedAndTheRankGetsNothing) {
  sched_->rank_up(0, 0);
  auto rc = connect(0, 0, "not the token");
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(sched_->routed_ranks(), 0u);
  EXPECT_EQ(sched_->dropped_frames(), 1u);
  auto notes = sched_->take_notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("wrong token"), std::string::npos) << notes[0];
  EXPECT_EQ(notes[0].find("not the token"), std::string::npos) << "the token is echoed";
  ASSERT_TRUE(rc->send_report(report(0, 0, 1)).ok());
  ASSERT_TRUE(handle(1));
  EXPECT_TRUE(reports_.empty());  // not routed: its report is not accepted
  EXPECT_EQ(sched_->dropped_frames(), 2u);
}

TEST_P(StepChannelContract, AStaleIncarnationIsRefusedAndTheLiveOneRouted) {
  sched_->rank_up(3, 2);
  auto stale = connect(3, 1);
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(sched_->routed_ranks(), 0u);
  EXPECT_EQ(sched_->dropped_frames(), 1u);
  auto live = connect(3, 2);
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(sched_->routed_ranks(), 1u);
  ASSERT_TRUE(stale->send_report(report(3, 1, 1)).ok());  // an older incarnation's report
  ASSERT_TRUE(live->send_report(report(3, 2, 1)).ok());
  ASSERT_TRUE(handle(2));
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0], report(3, 2, 1));
}

TEST_P(StepChannelContract, AReportIsAcceptedOnlyOnItsRanksConnection) {
  sched_->rank_up(0, 0);
  sched_->rank_up(1, 0);
  auto r0 = connect(0, 0);
  auto r1 = connect(1, 0);
  ASSERT_TRUE(handle(2));
  ASSERT_TRUE(r1->send_report(report(0, 0, 1)).ok());  // rank 1 speaks for rank 0
  ASSERT_TRUE(r0->send_report(report(0, 0, 1)).ok());
  ASSERT_TRUE(handle(2));
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(sched_->dropped_frames(), 1u);
}

TEST_P(StepChannelContract, ALostRankGetsNoStepsUntilItsNextIncarnationSaysHello) {
  sched_->rank_up(0, 0);
  sched_->rank_up(1, 0);
  auto r0 = connect(0, 0);
  auto r1 = connect(1, 0);
  ASSERT_TRUE(handle(2));
  sched_->rank_down(0);
  EXPECT_EQ(sched_->routed_ranks(), 1u);
  sched_->send_step(step(1));
  EXPECT_EQ(next(*r1), step(1));
  ASSERT_TRUE(r0->send_report(report(0, 0, 1)).ok());  // the lost incarnation still talks
  ASSERT_TRUE(handle(1));
  EXPECT_TRUE(reports_.empty());
  // The restarted rank registers with a higher incarnation and says hello.
  sched_->rank_up(0, 1);
  sched_->send_step(step(2));  // queued: its hello has not come yet
  auto again = connect(0, 1);
  ASSERT_TRUE(handle(1));
  EXPECT_EQ(next(*again), step(2));
  EXPECT_EQ(next(*r1), step(2));
  expect_nothing(*r0);
}

TEST_P(StepChannelContract, FramesThatDoNotDecodeAreDroppedAndTheChannelGoesOn) {
  sched_->rank_up(0, 0);
  auto raw = connect_raw(0, 0);
  ASSERT_TRUE(raw->send(encode(wire_hello{0, 0, "token"})).ok());
  const wire_bytes garbage{'\x03', '\x7f', '\x01'};  // a report tag with a truncated body
  const wire_bytes unknown{'\x09'};
  ASSERT_TRUE(raw->send(garbage).ok());
  ASSERT_TRUE(raw->send(unknown).ok());
  ASSERT_TRUE(raw->send(encode(step(5))).ok());  // a rank must not send metadata
  ASSERT_TRUE(raw->send(encode(report(0, 0, 1))).ok());
  ASSERT_TRUE(handle(5));
  EXPECT_EQ(sched_->dropped_frames(), 3u);
  EXPECT_EQ(sched_->take_notes().size(), 3u);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_EQ(reports_[0], report(0, 0, 1));
}

TEST_P(StepChannelContract, ARankRefusesAFrameThatIsNotMetadataAndTakesTheNextStep) {
  // The scheduler's transport sends a garbled frame to a routed rank, then a real step.
  sched_->rank_up(0, 0);
  auto rc = connect(0, 0);
  ASSERT_TRUE(handle(1));
  ASSERT_TRUE(sched_->transport().send(peer_id(0, 0), wire_bytes{'\x02', '\x01'}).ok());
  sched_->send_step(step(7));
  auto bad = rc->next_step(patience);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), errc::protocol_mismatch);
  EXPECT_EQ(next(*rc), step(7));
}

TEST_P(StepChannelContract, EndsCloseInEitherOrderAndARankSeesNoMoreSteps) {
  sched_->rank_up(0, 0);
  sched_->rank_up(1, 0);
  auto r0 = connect(0, 0);
  auto r1 = connect(1, 0);
  ASSERT_TRUE(handle(2));
  sched_->send_step(step(1));
  EXPECT_EQ(next(*r0), step(1));
  EXPECT_EQ(next(*r1), step(1));
  r0.reset();  // a rank's end goes first
  sched_->rank_down(0);
  sched_->send_step(step(2));
  EXPECT_EQ(next(*r1), step(2));
  sched_.reset();  // then the scheduler's end
  auto m = r1->next_step(0ms);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->has_value());
}

INSTANTIATE_TEST_SUITE_P(Transports, StepChannelContract,
                         ::testing::Values(kind::zmq_tcp, kind::zmq_inproc, kind::memory,
                                           kind::traced_zmq_tcp, kind::traced_memory,
                                           kind::faulty_zmq_tcp, kind::faulty_memory),
                         name_of);

}  // namespace
}  // namespace kvc::channel
