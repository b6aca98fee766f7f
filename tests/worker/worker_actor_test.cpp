// The worker actor on CAF's deterministic test scheduler, with the real sim copy engine: the
// registration (accepted, refused, timed out), execute mode (each step run on receipt, one report
// per step in order, sequence numbers without gaps, the bytes really moved), relay mode, and its
// end when the scheduler goes. To stay deterministic the test waits on the engine before it lets
// the actor's poll timer fire (advance): no sleeps.
#include "actors/worker/worker_actor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/error_bridge.hpp"
#include "tests/runtime/deterministic_fixture.hpp"
#include "tests/worker/synthetic_rank.hpp"

namespace kvc::worker {
namespace {

using namespace std::chrono_literals;
using runtime::coordinator_actor;
using runtime::worker_registration;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::load_job;
using testing::step_meta;
using testing::store_job;
using testing::synthetic_rank;

struct report {
  rank_id rank;
  uint32_t incarnation;
  step_id step;
  std::vector<completion_event> events;
};

/// A fake coordinator: records the reports.
coordinator_actor::behavior_type recording_coordinator(coordinator_actor::pointer,
                                                       std::shared_ptr<std::vector<report>> log) {
  return {
      [log](runtime::report_atom, rank_id r, uint32_t inc, step_id s,
            const std::vector<completion_event>& evs) {
        log->push_back({r, inc, s, evs});
      },
      [](runtime::expect_atom, step_id, const std::vector<job_id>&, const std::vector<job_id>&) {},
      [](runtime::rank_up_atom, rank_id, uint32_t) {},
      [](runtime::rank_down_atom, rank_id) {},
  };
}

/// What the fake scheduler saw and how it answers.
struct scheduler_script {
  std::vector<worker_registration> hellos;
  coordinator_actor answer;  // accept with this coordinator (and data-plane endpoint)...
  std::string data_endpoint;
  status refusal;            // ...or refuse with this error
  bool silent = false;       // ...or never answer
};

struct silent_state {
  std::vector<caf::typed_response_promise<coordinator_actor, std::string>> pending;
};

/// A fake scheduler following a script.
runtime::scheduler_actor::behavior_type fake_scheduler(
    runtime::scheduler_actor::stateful_pointer<silent_state> self,
    std::shared_ptr<scheduler_script> script) {
  return {
      [](const connector_output&) {},
      [self, script](runtime::hello_atom, const worker_registration& reg,
                     const runtime::worker_actor&) {
        script->hellos.push_back(reg);
        auto rp = self->make_response_promise<coordinator_actor, std::string>();
        if (script->silent) {
          self->state.pending.push_back(rp);
        } else if (!script->refusal.ok()) {
          rp.deliver(runtime::to_caf_error(script->refusal));
        } else {
          rp.deliver(script->answer, script->data_endpoint);
        }
        return rp;
      },
  };
}

class WorkerActorTest : public test_support::deterministic_actor_test {
 protected:
  WorkerActorTest() {
    coord_ = spawn(recording_coordinator, reports_);
    script_->answer = coord_;
    sched_ = spawn(fake_scheduler, script_);
    want_ = {.tp_size = 2,
             .pp_size = 1,
             .node = 0,
             .segment = "/kvc-test",
             .layout_checksum = 1,
             .token = "t"};
  }

  worker_options options(uint32_t incarnation = 0) {
    worker_options o;
    o.registration = runtime::make_registration(want_, rank_.rank, 0, incarnation, 77);
    o.poll_interval = poll_;
    o.register_timeout = 2s;
    o.on_registered = [this](const status& s) { registered_.push_back(s); };
    return o;
  }

  /// Spawns an execute-mode worker whose factory builds rank_'s runtime.
  worker_impl start_executing(uint32_t incarnation = 0) {
    auto w = spawn_executing_worker(sys(), sched_, options(incarnation), [this] {
      ++factory_calls_;
      return rank_.make();
    });
    EXPECT_TRUE(w.ok()) << w.error().to_string();
    track(*w);
    return *w;
  }

  /// Lets every open step finish: waits on the engine, then fires the poll timer.
  void finish_transfers() {
    ASSERT_NE(rank_.runtime, nullptr);
    ASSERT_TRUE(rank_.runtime->worker().wait_in_flight().ok());
    advance(poll_);
  }


  std::vector<step_id> reported_steps() const {
    std::vector<step_id> out;
    for (const auto& r : *reports_) out.push_back(r.step);
    return out;
  }

  const std::chrono::microseconds poll_{1000};
  synthetic_rank rank_{1};
  runtime::handshake_expectation want_;
  std::shared_ptr<std::vector<report>> reports_ = std::make_shared<std::vector<report>>();
  std::shared_ptr<scheduler_script> script_ = std::make_shared<scheduler_script>();
  /// Starts an executing worker and checks that its registration ends it with `code`, a
  /// message containing `what`, and no runtime built.
  void expect_refused(errc code, const std::string& what) {
    worker_impl w = start_executing();
    auto down = watch(w);
    run();
    ASSERT_EQ(registered_.size(), 1u);
    EXPECT_EQ(registered_[0].code(), code);
    EXPECT_THAT(registered_[0].message(), HasSubstr(what));
    EXPECT_EQ(factory_calls_, 0);
    ASSERT_TRUE(down->has_value());
    EXPECT_EQ(runtime::to_status(**down).code(), code);
  }

  coordinator_actor coord_;
  runtime::scheduler_actor sched_;
  std::vector<status> registered_;
  int factory_calls_ = 0;
};

TEST_F(WorkerActorTest, RegistersThenExecutesEachStepAndReportsOncePerStepInOrder) {
  worker_impl w = start_executing(/*incarnation=*/5);
  ASSERT_EQ(script_->hellos.size(), 1u);
  EXPECT_EQ(script_->hellos[0], options(5).registration);
  ASSERT_EQ(registered_.size(), 1u);
  EXPECT_TRUE(registered_[0].ok()) << registered_[0].to_string();
  EXPECT_EQ(factory_calls_, 1);

  caf::anon_send(w, step_meta(1, {}, {store_job(10, {0}, {1, 2})}));
  run();
  finish_transfers();
  caf::anon_send(w, step_meta(2, {load_job(11, {0}, {5, 6})}));
  run();
  finish_transfers();
  caf::anon_send(w, step_meta(3, {}, {store_job(12, {1}, {5, 6})}));
  run();
  finish_transfers();

  EXPECT_THAT(reported_steps(), ElementsAre(1, 2, 3));
  std::vector<job_id> jobs;
  uint64_t expected_seq = 0;
  for (const auto& r : *reports_) {
    EXPECT_EQ(r.rank, 1u);
    EXPECT_EQ(r.incarnation, 5u);
    for (const auto& ev : r.events) {
      EXPECT_EQ(ev.seq, expected_seq++);
      EXPECT_EQ(ev.step, r.step);
      EXPECT_EQ(ev.rank, 1u);
      EXPECT_EQ(ev.incarnation, 5u);
      EXPECT_TRUE(ev.ok) << to_string(ev.error);
      EXPECT_EQ(ev.bytes, rank_.kv.slot_bytes());
      jobs.push_back(ev.job);
    }
  }
  EXPECT_THAT(jobs, ElementsAre(10, 11, 12));
  // The bytes moved: slot 0 got blocks 1,2; they were loaded into 5,6 and stored again to slot 1.
  EXPECT_TRUE(rank_.slot_holds(0, {1, 2}));
  EXPECT_TRUE(rank_.gpu_block_holds(5, 1));
  EXPECT_TRUE(rank_.slot_holds(1, {1, 2}));
  // Nothing is open: the timer is not re-armed.
  EXPECT_EQ(advance(poll_), 0u);
}

TEST_F(WorkerActorTest, AStepStillInFlightIsClosedByTheNextOne) {
  worker_impl w = start_executing();
  rank_.sim->pause(cuda::direction::gpu_to_cpu);
  caf::anon_send(w, step_meta(1, {}, {store_job(10, {2}, {3, 4})}));
  run();
  EXPECT_EQ(advance(poll_), 1u);  // polled: still in flight, re-armed
  EXPECT_TRUE(reports_->empty());

  caf::anon_send(w, step_meta(2));
  run();
  ASSERT_EQ(reports_->size(), 1u);
  EXPECT_EQ((*reports_)[0].step, 1u);
  EXPECT_TRUE((*reports_)[0].events.empty());

  rank_.sim->resume(cuda::direction::gpu_to_cpu);
  finish_transfers();
  ASSERT_EQ(reports_->size(), 2u);
  EXPECT_EQ((*reports_)[1].step, 2u);
  ASSERT_EQ((*reports_)[1].events.size(), 1u);
  EXPECT_EQ((*reports_)[1].events[0].job, 10u);
  EXPECT_EQ((*reports_)[1].events[0].seq, 0u);
  EXPECT_TRUE(rank_.slot_holds(2, {3, 4}));
}

TEST_F(WorkerActorTest, ARefusedRegistrationEndsTheWorkerWithTheReason) {
  script_->refusal =
      make_error(errc::protocol_mismatch, "registration of rank 1 refused: wrong token");
  expect_refused(errc::protocol_mismatch, "wrong token");
}

TEST_F(WorkerActorTest, ASchedulerWithAZeroMqDataPlaneIsRefusedClearly) {
  script_->data_endpoint = "tcp://127.0.0.1:5555";
  expect_refused(errc::protocol_mismatch, "ZeroMQ data plane");
}

TEST_F(WorkerActorTest, ARegistrationWithoutAnswerTimesOut) {
  script_->silent = true;
  worker_impl w = start_executing();
  auto down = watch(w);
  run();
  EXPECT_TRUE(registered_.empty());
  advance(2s);
  ASSERT_EQ(registered_.size(), 1u);
  EXPECT_EQ(registered_[0].code(), errc::timeout);
  ASSERT_TRUE(down->has_value());
  EXPECT_EQ(factory_calls_, 0);
}

TEST_F(WorkerActorTest, ARuntimeThatCannotBeBuiltEndsTheWorker) {
  auto w = spawn_executing_worker(sys(), sched_, options(), [] {
    return result<std::unique_ptr<rank_runtime>>(make_error(errc::shm_error, "no segment"));
  });
  ASSERT_TRUE(w.ok());
  track(*w);
  auto down = watch(*w);
  run();
  ASSERT_EQ(registered_.size(), 1u);
  EXPECT_EQ(registered_[0], make_error(errc::shm_error, "no segment"));
  ASSERT_TRUE(down->has_value());
  EXPECT_EQ(runtime::to_status(**down), make_error(errc::shm_error, "no segment"));
}

TEST_F(WorkerActorTest, LosingTheSchedulerEndsTheWorkerWithItsReason) {
  worker_impl w = start_executing();
  auto down = watch(w);
  run();
  caf::anon_send_exit(sched_, caf::exit_reason::user_shutdown);
  run();
  ASSERT_TRUE(down->has_value());
  EXPECT_EQ(**down, caf::exit_reason::user_shutdown);
}

TEST_F(WorkerActorTest, RelayModeHandsMetadataToTheEngineAndStampsItsResults) {
  auto inbox = std::make_shared<metadata_queue>();
  auto w = spawn_relay_worker(sys(), sched_, options(2), inbox);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  track(*w);
  ASSERT_EQ(registered_.size(), 1u);
  EXPECT_TRUE(registered_[0].ok());

  caf::anon_send(*w, step_meta(1, {load_job(1, {0}, {1, 2})}));
  caf::anon_send(*w, step_meta(2));
  run();
  auto got = inbox->take_all();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], step_meta(1, {load_job(1, {0}, {1, 2})}));
  EXPECT_EQ(got[1].step, 2u);
  EXPECT_TRUE(reports_->empty());  // the engine reports, not the actor

  std::vector<job_result> results{
      {.job = 1, .kind = transfer_kind::load, .ok = true, .bytes = 8},
      {.job = 4, .kind = transfer_kind::store, .ok = false, .error = errc::device_error}};
  caf::anon_send(*w, jobs_done_atom::value, step_id{1}, results);
  caf::anon_send(*w, jobs_done_atom::value, step_id{2}, std::vector<job_result>{});
  caf::anon_send(*w, jobs_done_atom::value, step_id{3}, std::vector<job_result>{{.job = 9}});
  run();
  EXPECT_THAT(reported_steps(), ElementsAre(1, 2, 3));
  ASSERT_EQ((*reports_)[0].events.size(), 2u);
  EXPECT_EQ((*reports_)[0].events[0], (completion_event{.rank = 1,
                                                        .incarnation = 2,
                                                        .seq = 0,
                                                        .step = 1,
                                                        .job = 1,
                                                        .kind = transfer_kind::load,
                                                        .ok = true,
                                                        .bytes = 8}));
  EXPECT_EQ((*reports_)[0].events[1].seq, 1u);
  EXPECT_EQ((*reports_)[0].events[1].error, errc::device_error);
  EXPECT_EQ((*reports_)[2].events[0].seq, 2u);

  EXPECT_FALSE(inbox->closed());
  caf::anon_send_exit(*w, caf::exit_reason::user_shutdown);
  run();
  EXPECT_TRUE(inbox->closed());
}

TEST_F(WorkerActorTest, SpawnRejectsBadArguments) {
  auto factory = [] {
    return result<std::unique_ptr<rank_runtime>>(make_error(errc::internal, ""));
  };
  EXPECT_EQ(spawn_executing_worker(sys(), {}, options(), factory).code(), errc::invalid_argument);
  EXPECT_EQ(spawn_executing_worker(sys(), sched_, options(), {}).code(), errc::invalid_argument);
  worker_options o = options();
  o.poll_interval = std::chrono::microseconds{0};
  EXPECT_EQ(spawn_executing_worker(sys(), sched_, o, factory).code(), errc::invalid_argument);
  EXPECT_EQ(spawn_relay_worker(sys(), sched_, options(), nullptr).code(), errc::invalid_argument);
  EXPECT_TRUE(script_->hellos.empty());  // nothing was spawned
}

}  // namespace
}  // namespace kvc::worker
