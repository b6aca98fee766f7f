// The scheduler actor on CAF's deterministic test scheduler: registration (accepted, refused;
// rank_up to the coordinator, the reply naming the coordinator and the step channel), rank loss
// and return, ready, and stop.
#include "actors/scheduler/scheduler_actor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/control/error_bridge.hpp"
#include "tests/control/deterministic_fixture.hpp"

namespace kvc::scheduler {
namespace {

using control::coordinator_actor;
using control::worker_actor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using event_log = std::vector<std::string>;

/// A fake coordinator: logs every message it gets.
coordinator_actor::behavior_type recording_coordinator(coordinator_actor::pointer,
                                                       std::shared_ptr<event_log> log) {
  return {
      [log](control::rank_up_atom, rank_id r, uint32_t inc) {
        log->push_back("rank_up " + std::to_string(r) + " " + std::to_string(inc));
      },
      [log](control::rank_down_atom, rank_id r) {
        log->push_back("rank_down " + std::to_string(r));
      },
  };
}

/// What a fake worker learnt from its registration.
struct registration_outcome {
  bool answered = false;
  coordinator_actor coordinator;
  std::string channel_endpoint;
  status error;
};

/// A fake worker: registers on start; a stop is logged as "stop r<rank>" and ends it.
worker_actor::behavior_type fake_worker(worker_actor::pointer self, control::scheduler_actor sched,
                                        worker_registration reg,
                                        std::shared_ptr<registration_outcome> out,
                                        std::shared_ptr<event_log> log) {
  self->request(sched, caf::infinite, control::hello_atom::value, reg,
                caf::actor_cast<worker_actor>(self))
      .then(
          [out](coordinator_actor c, std::string channel_endpoint) {
            out->answered = true;
            out->channel_endpoint = std::move(channel_endpoint);
            out->coordinator = std::move(c);
          },
          [out](caf::error& e) {
            out->answered = true;
            out->error = control::to_status(e);
          });
  return {[self, log, rank = reg.rank](control::stop_atom) {
    log->push_back("stop r" + std::to_string(rank));
    self->quit(caf::exit_reason::user_shutdown);
  }};
}

class SchedulerActorTest : public test_support::deterministic_actor_test {
 protected:
  scheduler::handshake_expectation expectation(uint32_t tp) {
    return {.topology = {tp, 1, 0},
            .segment = "/kvc-test-seg",
            .layout_checksum = 0xfeed,
            .token = "tok"};
  }

  /// Starts a scheduler for a world of `tp` ranks with the recording coordinator.
  void start(uint32_t tp, std::string channel_endpoint = {}) {
    want_ = expectation(tp);
    fake_coord_ = spawn(recording_coordinator, log_);
    auto s = spawn_scheduler(
        sys(), {.handshake = want_, .channel_endpoint = std::move(channel_endpoint)}, fake_coord_);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    sched_ = *s;
    track(sched_);
  }

  worker_registration reg(rank_id rank, uint32_t incarnation = 0) {
    return scheduler::make_registration(want_, rank, incarnation, 1000 + rank);
  }

  /// Spawns a fake worker that registers with `r`; returns its handle and outcome.
  std::pair<worker_actor, std::shared_ptr<registration_outcome>> join_worker(
      const worker_registration& r) {
    auto out = std::make_shared<registration_outcome>();
    worker_actor w = spawn(fake_worker, control::scheduler_actor{sched_}, r, out, log_);
    run();
    EXPECT_TRUE(out->answered);
    return {w, out};
  }

  /// Asks the scheduler `Atom` and stores the answer in the returned slot when it comes.
  template <class Atom>
  std::shared_ptr<std::optional<uint32_t>> ask() {
    auto answer = std::make_shared<std::optional<uint32_t>>();
    spawn([answer, s = sched_](caf::event_based_actor* self) {
      self->request(s, caf::infinite, Atom::value).then([answer](uint32_t n) { *answer = n; });
    });
    return answer;
  }


  /// The log lines starting with `prefix`.
  std::vector<std::string> coord_lines(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& l : *log_) {
      if (l.rfind(prefix, 0) == 0) out.push_back(l);
    }
    return out;
  }

  scheduler::handshake_expectation want_;
  std::shared_ptr<event_log> log_ = std::make_shared<event_log>();  // coordinator and workers
  coordinator_actor fake_coord_;
  scheduler_impl sched_;
};

TEST_F(SchedulerActorTest, RegistersEveryRankAndAnnouncesEachToTheCoordinator) {
  start(2, "tcp://127.0.0.1:4242");
  auto ready = ask<control::ready_atom>();
  run();
  auto [w1, out1] = join_worker(reg(1, 4));
  EXPECT_FALSE(ready->has_value());  // rank 0 still missing
  auto [w0, out0] = join_worker(reg(0));
  EXPECT_EQ(*ready, 2u);
  EXPECT_TRUE(out0->error.ok()) << out0->error.to_string();
  EXPECT_TRUE(out1->error.ok()) << out1->error.to_string();
  EXPECT_EQ(out0->coordinator, fake_coord_);  // the reply names the real coordinator
  EXPECT_EQ(out1->coordinator, fake_coord_);
  EXPECT_EQ(out0->channel_endpoint, "tcp://127.0.0.1:4242");
  EXPECT_THAT(coord_lines("rank_up"), ElementsAre("rank_up 1 4", "rank_up 0 0"));
  auto again = ask<control::ready_atom>();  // complete: answered at once
  run();
  EXPECT_EQ(*again, 2u);
}

TEST_F(SchedulerActorTest, RefusesRegistrationsThatDoNotMatchAndLiveDuplicates) {
  start(2);
  auto refused = [&](worker_registration r, errc code, const char* why) {
    auto [w, out] = join_worker(r);
    EXPECT_EQ(out->error.code(), code) << why;
    EXPECT_THAT(out->error.message(), HasSubstr(why));
    EXPECT_FALSE(out->coordinator);
  };
  worker_registration bad = reg(0);
  bad.token = "nope";
  refused(bad, errc::protocol_mismatch, "wrong token");
  bad = reg(0);
  bad.protocol_version = protocol_version + 1;
  refused(bad, errc::protocol_mismatch, "protocol version");
  bad = reg(0);
  bad.layout_checksum = 0xbeef;
  refused(bad, errc::layout_mismatch, "layout checksum");
  bad = reg(0);
  bad.segment = "/kvc-other";
  refused(bad, errc::layout_mismatch, "shm segment /kvc-other");
  bad = reg(1);
  bad.rank = 2;
  bad.tp_rank = 2;
  refused(bad, errc::invalid_argument, "rank out of range");
  EXPECT_TRUE(coord_lines("rank_up").empty());

  auto [w0, ok] = join_worker(reg(0));
  EXPECT_TRUE(ok->error.ok());
  refused(reg(0, 1), errc::protocol_mismatch, "already registered and alive");
  EXPECT_THAT(coord_lines("rank_up"), ElementsAre("rank_up 0 0"));
}

TEST_F(SchedulerActorTest, AWorkerDeathIsReportedAndItsRankReturnsOnlyWithAHigherIncarnation) {
  start(1);
  auto [w, out] = join_worker(reg(0, 2));
  ASSERT_TRUE(out->error.ok());
  caf::anon_send_exit(w, caf::exit_reason::kill);
  run();
  EXPECT_THAT(coord_lines("rank_"), ElementsAre("rank_up 0 2", "rank_down 0"));

  auto [again, stale] = join_worker(reg(0, 2));
  EXPECT_EQ(stale->error.code(), errc::protocol_mismatch);
  EXPECT_THAT(stale->error.message(), HasSubstr("incarnation above its last one, 2"));
  auto [next, fresh] = join_worker(reg(0, 3));
  EXPECT_TRUE(fresh->error.ok()) << fresh->error.to_string();
  EXPECT_THAT(coord_lines("rank_"), ElementsAre("rank_up 0 2", "rank_down 0", "rank_up 0 3"));

  auto ready = ask<control::ready_atom>();
  run();
  EXPECT_EQ(*ready, 1u);
}

TEST_F(SchedulerActorTest, StopEndsEveryWorkerAndAnswersOnceAllAreDown) {
  start(2);
  auto [w0, o0] = join_worker(reg(0));
  auto [w1, o1] = join_worker(reg(1));
  auto down0 = watch(w0);
  auto down1 = watch(w1);
  run();
  auto stopped = ask<control::stop_atom>();
  run();
  EXPECT_EQ(*stopped, 2u);
  EXPECT_THAT(coord_lines("stop"), ElementsAre("stop r0", "stop r1"));
  ASSERT_TRUE(down0->has_value());
  ASSERT_TRUE(down1->has_value());
  EXPECT_EQ(**down0, caf::exit_reason::user_shutdown);
  EXPECT_THAT(coord_lines("rank_down"), ElementsAre("rank_down 0", "rank_down 1"));

  auto [late, refused] = join_worker(reg(0, 1));
  EXPECT_EQ(refused->error.code(), errc::not_ready);
  EXPECT_THAT(refused->error.message(), HasSubstr("the scheduler is stopping"));
  auto again = ask<control::stop_atom>();  // nothing left to stop: answered at once
  run();
  EXPECT_EQ(*again, 2u);
}

TEST_F(SchedulerActorTest, AStopWithoutWorkersIsAnsweredAtOnce) {
  start(2);
  auto stopped = ask<control::stop_atom>();
  run();
  EXPECT_EQ(*stopped, 0u);
}

TEST_F(SchedulerActorTest, SpawnRejectsBadOptions) {
  auto coord = spawn(recording_coordinator, log_);
  auto no_coordinator = spawn_scheduler(sys(), {.handshake = expectation(1), .channel_endpoint = {}},
                                        coordinator_actor{});
  EXPECT_EQ(no_coordinator.code(), errc::invalid_argument);
  scheduler::handshake_expectation e = expectation(1);
  e.token.clear();
  EXPECT_EQ(spawn_scheduler(sys(), {.handshake = e, .channel_endpoint = {}}, coord).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::scheduler
