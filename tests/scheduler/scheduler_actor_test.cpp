// The scheduler actor on CAF's deterministic test scheduler: registration (accepted, refused),
// the per-step fan-out (expect to the coordinator, then the metadata to every live worker, once
// per step, in order), rank loss, stop, and outputs through its own coordinator.
#include "actors/scheduler/scheduler_actor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/error_bridge.hpp"
#include "tests/runtime/deterministic_fixture.hpp"

namespace kvc::scheduler {
namespace {

using runtime::coordinator_actor;
using runtime::worker_actor;
using runtime::worker_registration;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using event_log = std::vector<std::string>;

std::string join(const std::vector<job_id>& ids) {
  std::string s;
  for (job_id id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return "[" + s + "]";
}

/// A fake coordinator: logs every message it gets.
coordinator_actor::behavior_type recording_coordinator(coordinator_actor::pointer,
                                                       std::shared_ptr<event_log> log) {
  return {
      [log](runtime::report_atom, rank_id r, uint32_t, step_id s,
            const std::vector<completion_event>&) {
        log->push_back("report " + std::to_string(r) + " " + std::to_string(s));
      },
      [log](runtime::expect_atom, step_id s, const std::vector<job_id>& loads,
            const std::vector<job_id>& stores) {
        log->push_back("expect " + std::to_string(s) + " " + join(loads) + " " + join(stores));
      },
      [log](runtime::rank_up_atom, rank_id r, uint32_t inc) {
        log->push_back("rank_up " + std::to_string(r) + " " + std::to_string(inc));
      },
      [log](runtime::rank_down_atom, rank_id r) {
        log->push_back("rank_down " + std::to_string(r));
      },
  };
}

/// What a fake worker learnt from its registration.
struct registration_outcome {
  bool answered = false;
  coordinator_actor coordinator;
  std::string data_endpoint;
  status error;
};

/// A fake worker: registers on start, logs every step it receives as "meta r<rank> <step>".
worker_actor::behavior_type fake_worker(worker_actor::pointer self, runtime::scheduler_actor sched,
                                        worker_registration reg,
                                        std::shared_ptr<registration_outcome> out,
                                        std::shared_ptr<event_log> log) {
  self->request(sched, caf::infinite, runtime::hello_atom::value, reg,
                caf::actor_cast<worker_actor>(self))
      .then(
          [out](coordinator_actor c, std::string data_endpoint) {
            out->answered = true;
            out->data_endpoint = std::move(data_endpoint);
            out->coordinator = std::move(c);
          },
          [out](caf::error& e) {
            out->answered = true;
            out->error = runtime::to_status(e);
          });
  return {[log, rank = reg.rank](const connector_metadata& m) {
    log->push_back("meta r" + std::to_string(rank) + " " + std::to_string(m.step));
  }};
}

transfer_job job(job_id id, transfer_kind kind) {
  transfer_job j;
  j.id = id;
  j.kind = kind;
  j.slots = {static_cast<cpu_slot>(id)};
  j.gpu_blocks = {1};
  return j;
}

connector_metadata step_meta(step_id s, std::vector<job_id> loads = {},
                             std::vector<job_id> stores = {}) {
  connector_metadata m;
  m.step = s;
  for (job_id id : loads) m.loads.push_back(job(id, transfer_kind::load));
  for (job_id id : stores) m.stores.push_back(job(id, transfer_kind::store));
  return m;
}

class SchedulerActorTest : public test_support::deterministic_actor_test {
 protected:
  runtime::handshake_expectation expectation(uint32_t tp) {
    return {.tp_size = tp,
            .pp_size = 1,
            .node = 0,
            .segment = "/kvc-test-seg",
            .layout_checksum = 0xfeed,
            .token = "tok"};
  }

  /// Starts a scheduler for a world of `tp` ranks; with the fake coordinator unless `own`.
  void start(uint32_t tp, bool own_coordinator = false, std::string data_endpoint = {}) {
    want_ = expectation(tp);
    coordinator_actor coord;
    if (!own_coordinator) {
      fake_coord_ = spawn(recording_coordinator, log_);
      coord = fake_coord_;
    }
    auto s = spawn_scheduler(
        sys(), {.handshake = want_, .coordinator = {}, .data_endpoint = std::move(data_endpoint)},
        outputs_, coord);
    ASSERT_TRUE(s.ok()) << s.error().to_string();
    sched_ = *s;
    track(sched_);
  }

  worker_registration reg(rank_id rank, uint32_t incarnation = 0) {
    return runtime::make_registration(want_, rank, 0, incarnation, 1000 + rank);
  }

  /// Spawns a fake worker that registers with `r`; returns its handle and outcome.
  std::pair<worker_actor, std::shared_ptr<registration_outcome>> join_worker(
      const worker_registration& r) {
    auto out = std::make_shared<registration_outcome>();
    worker_actor w = spawn(fake_worker, runtime::scheduler_actor{sched_}, r, out, log_);
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

  std::vector<std::string> worker_lines(rank_id r) const {
    std::vector<std::string> out;
    const std::string prefix = "meta r" + std::to_string(r) + " ";
    for (const auto& l : *log_) {
      if (l.rfind(prefix, 0) == 0) out.push_back(l.substr(prefix.size()));
    }
    return out;
  }

  runtime::handshake_expectation want_;
  std::shared_ptr<output_queue> outputs_ = std::make_shared<output_queue>();
  std::shared_ptr<event_log> log_ = std::make_shared<event_log>();  // coordinator and workers
  coordinator_actor fake_coord_;
  scheduler_impl sched_;
};

// The planner's metadata crosses processes: its per-group job fields and the flushed requests
// survive CAF's serialiser (the wire codec uses the same inspect overloads).
TEST_F(SchedulerActorTest, PlannerMetadataRoundTripsWithGroupFieldsAndFlushedRequests) {
  connector_metadata meta;
  meta.step = 12;
  transfer_job job;
  job.id = 7;
  job.request_id = "r3";
  job.kind = transfer_kind::load;
  job.slots = {4, 5};
  job.gpu_blocks = {11, 12, 13};
  job.skip = 1;
  job.group_sizes = {3};
  job.block_indices = {5};
  meta.loads.push_back(job);
  job.group_sizes = {3, 2, 1, 9};  // every group slot used
  job.block_indices = {};
  meta.stores.push_back(job);
  meta.flush = {2, 3};
  meta.flush_requests = {"r1", "r9"};
  std::vector<char> buf;
  caf::binary_serializer sink{sys(), buf};
  auto err = sink(meta);
  ASSERT_FALSE(err) << sys().render(err);
  connector_metadata back;
  caf::binary_deserializer source{sys(), buf};
  err = source(back);
  ASSERT_FALSE(err) << sys().render(err);
  EXPECT_EQ(back, meta);
  EXPECT_EQ(back.loads[0].block_indices, per_group{5});
  EXPECT_EQ(back.stores[0].group_sizes, (per_group{3, 2, 1, 9}));
  EXPECT_EQ(back.flush_requests, (std::vector<std::string>{"r1", "r9"}));
}

TEST_F(SchedulerActorTest, RegistersEveryRankThenFansOutEachStepOnceInOrder) {
  start(2);
  auto ready = ask<ready_atom>();
  run();
  auto [w1, out1] = join_worker(reg(1, 4));
  EXPECT_FALSE(ready->has_value());  // rank 0 still missing
  auto [w0, out0] = join_worker(reg(0));
  EXPECT_EQ(*ready, 2u);
  EXPECT_TRUE(out0->error.ok()) << out0->error.to_string();
  EXPECT_TRUE(out1->error.ok()) << out1->error.to_string();
  EXPECT_EQ(out0->coordinator, fake_coord_);
  EXPECT_EQ(out1->coordinator, fake_coord_);
  EXPECT_EQ(out0->data_endpoint, "");  // steps travel as CAF messages
  EXPECT_THAT(coord_lines("rank_up"), ElementsAre("rank_up 1 4", "rank_up 0 0"));

  caf::anon_send(sched_, step_meta(1, {10}, {11, 12}));
  caf::anon_send(sched_, step_meta(2));
  caf::anon_send(sched_, step_meta(3, {13}));
  run();
  EXPECT_THAT(coord_lines("expect"),
              ElementsAre("expect 1 [10] [11,12]", "expect 2 [] []", "expect 3 [13] []"));
  EXPECT_THAT(worker_lines(0), ElementsAre("1", "2", "3"));
  EXPECT_THAT(worker_lines(1), ElementsAre("1", "2", "3"));
  // The coordinator learnt of each step's jobs before any worker saw the step (one log for the
  // coordinator and the workers, in delivery order).
  auto at = [&](const std::string& line) {
    return std::find(log_->begin(), log_->end(), line) - log_->begin();
  };
  for (std::string s : {"1", "2", "3"}) {
    auto expect_at =
        std::find_if(log_->begin(), log_->end(),
                     [&](const std::string& l) { return l.rfind("expect " + s + " ", 0) == 0; }) -
        log_->begin();
    EXPECT_LT(expect_at, at("meta r0 " + s)) << s;
    EXPECT_LT(expect_at, at("meta r1 " + s)) << s;
  }
  EXPECT_TRUE(outputs_->take_all().empty());
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
  bad.protocol_version = runtime::protocol_version + 1;
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

  // Only the admitted worker receives steps.
  caf::anon_send(sched_, step_meta(1));
  run();
  EXPECT_THAT(worker_lines(0), ElementsAre("1"));
  EXPECT_TRUE(worker_lines(1).empty());
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

  auto ready = ask<ready_atom>();
  caf::anon_send(sched_, step_meta(7));
  run();
  EXPECT_EQ(*ready, 1u);
  EXPECT_THAT(worker_lines(0), ElementsAre("7"));  // once: the refused worker got nothing
}

TEST_F(SchedulerActorTest, AStepThatDoesNotGoUpIsDropped) {
  start(1);
  join_worker(reg(0));
  for (step_id s : {5, 5, 4, 6}) caf::anon_send(sched_, step_meta(s, {s}));
  run();
  EXPECT_THAT(worker_lines(0), ElementsAre("5", "6"));
  EXPECT_THAT(coord_lines("expect"), ElementsAre("expect 5 [5] []", "expect 6 [6] []"));
}

TEST_F(SchedulerActorTest, StopEndsEveryWorkerAndAnswersOnceAllAreDown) {
  start(2);
  auto [w0, o0] = join_worker(reg(0));
  auto [w1, o1] = join_worker(reg(1));
  auto down0 = watch(w0);
  auto down1 = watch(w1);
  run();
  auto stopped = ask<stop_atom>();
  run();
  EXPECT_EQ(*stopped, 2u);
  ASSERT_TRUE(down0->has_value());
  ASSERT_TRUE(down1->has_value());
  EXPECT_EQ(**down0, caf::exit_reason::user_shutdown);
  EXPECT_THAT(coord_lines("rank_down"), ElementsAre("rank_down 0", "rank_down 1"));

  auto [late, refused] = join_worker(reg(0, 1));
  EXPECT_EQ(refused->error.code(), errc::not_ready);
  EXPECT_THAT(refused->error.message(), HasSubstr("the scheduler is stopping"));
  auto again = ask<stop_atom>();  // nothing left to stop: answered at once
  run();
  EXPECT_EQ(*again, 2u);
}

TEST_F(SchedulerActorTest, TheRegistrationReplyNamesTheDataPlaneEndpoint) {
  start(1, /*own_coordinator=*/false, "tcp://127.0.0.1:4242");
  auto [w, out] = join_worker(reg(0, 2));
  ASSERT_TRUE(out->error.ok()) << out->error.to_string();
  EXPECT_EQ(out->data_endpoint, "tcp://127.0.0.1:4242");
  EXPECT_EQ(out->coordinator, fake_coord_);  // the data plane's host hears rank_up
  EXPECT_THAT(coord_lines("rank_up"), ElementsAre("rank_up 0 2"));
}

TEST_F(SchedulerActorTest, ItsOwnCoordinatorAggregatesReportsIntoTheOutputQueue) {
  start(1, /*own_coordinator=*/true);
  auto [w, out] = join_worker(reg(0));
  ASSERT_TRUE(out->error.ok());
  ASSERT_TRUE(out->coordinator);
  caf::anon_send(sched_, step_meta(3, {21}, {22}));
  run();
  std::vector<completion_event> events{{.rank = 0,
                                        .seq = 0,
                                        .step = 3,
                                        .job = 21,
                                        .kind = transfer_kind::load,
                                        .ok = true,
                                        .bytes = 64},
                                       {.rank = 0,
                                        .seq = 1,
                                        .step = 3,
                                        .job = 22,
                                        .kind = transfer_kind::store,
                                        .ok = false,
                                        .error = errc::device_error}};
  caf::anon_send(out->coordinator, runtime::report_atom::value, rank_id{0}, uint32_t{0}, step_id{3},
                 events);
  run();
  auto outs = outputs_->take_all();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].step, 3u);
  ASSERT_EQ(outs[0].jobs.size(), 2u);
  EXPECT_EQ(outs[0].jobs[0],
            (job_result{.job = 21, .kind = transfer_kind::load, .ok = true, .bytes = 64}));
  EXPECT_EQ(outs[0].jobs[1].job, 22u);
  EXPECT_FALSE(outs[0].jobs[1].ok);
  EXPECT_EQ(outs[0].jobs[1].error, errc::device_error);

  // Ending the scheduler ends its linked coordinator and closes the queue.
  auto coord_down = watch(out->coordinator);
  run();
  EXPECT_FALSE(outputs_->closed());
  caf::anon_send_exit(sched_, caf::exit_reason::user_shutdown);
  run();
  EXPECT_TRUE(outputs_->closed());
  ASSERT_TRUE(coord_down->has_value());
  EXPECT_EQ(**coord_down, caf::exit_reason::user_shutdown);
}

TEST_F(SchedulerActorTest, SpawnRejectsBadOptions) {
  auto no_queue = spawn_scheduler(sys(), {.handshake = expectation(1), .coordinator = {}}, nullptr);
  EXPECT_EQ(no_queue.code(), errc::invalid_argument);
  runtime::handshake_expectation e = expectation(1);
  e.token.clear();
  EXPECT_EQ(spawn_scheduler(sys(), {.handshake = e, .coordinator = {}}, outputs_).code(),
            errc::invalid_argument);
  scheduler_options o{.handshake = expectation(1), .coordinator = {}};
  o.coordinator.tick_interval = std::chrono::nanoseconds{0};
  EXPECT_EQ(spawn_scheduler(sys(), o, outputs_).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::scheduler
