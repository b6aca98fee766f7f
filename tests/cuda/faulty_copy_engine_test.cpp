// fault_plan validation, the pure fault_injector, and the faulty_copy_engine decorator around
// the sim backend. Every case is deterministic: delays are released by counted submissions or
// explicit calls, never by time.
#include "cuda/faulty_copy_engine.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/fault_injector.hpp"
#include "cuda/sim_copy_engine.hpp"

namespace kvc::cuda {
namespace {

fault_rule nth_rule(fault_target target, uint64_t nth, fault_action action,
                    uint64_t release_after = 0) {
  fault_rule r;
  r.target = target;
  r.trigger = fault_trigger::nth;
  r.nth = nth;
  r.action = action;
  r.release_after = release_after;
  return r;
}

TEST(FaultPlanTest, ValidatesRules) {
  EXPECT_TRUE(validate(fault_plan{}).ok());
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 0, fault_action::none));
  EXPECT_EQ(validate(p).code(), errc::invalid_argument);
  p.rules[0] = nth_rule(fault_target::store, 0, fault_action::fail_at_submit, 3);
  EXPECT_EQ(validate(p).code(), errc::invalid_argument) << "release_after needs delay";
  p.rules[0].release_after = 0;
  p.rules[0].trigger = fault_trigger::probability;
  p.rules[0].probability = 1.5;
  status s = validate(p);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_NE(s.message().find("rule 0"), std::string::npos);
  p.rules[0].probability = 0.25;
  EXPECT_TRUE(validate(p).ok());
}

TEST(FaultInjectorTest, NthCountsWithinTheRuleTarget) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 1, fault_action::fail_at_submit));
  p.rules.push_back(nth_rule(fault_target::any, 3, fault_action::delay));
  auto inj = fault_injector::make(p);
  ASSERT_TRUE(inj.ok());
  const std::vector<fault_target> seq{fault_target::load, fault_target::store, fault_target::load,
                                      fault_target::store, fault_target::store};
  std::vector<fault_action> got;
  for (fault_target t : seq) got.push_back(inj->next(t).action);
  // store #1 is the 4th transfer overall (any #3): the first matching rule wins.
  EXPECT_EQ(got,
            (std::vector<fault_action>{fault_action::none, fault_action::none, fault_action::none,
                                       fault_action::fail_at_submit, fault_action::none}));
  EXPECT_EQ(inj->seen(fault_target::any), 5u);
  EXPECT_EQ(inj->seen(fault_target::store), 3u);
  EXPECT_EQ(inj->fired(0), 1u);
  EXPECT_EQ(inj->fired(1), 0u);
}

TEST(FaultInjectorTest, ProbabilityIsSeededAndReplays) {
  fault_plan p;
  p.seed = 42;
  fault_rule r;
  r.target = fault_target::store;
  r.trigger = fault_trigger::probability;
  r.probability = 0.3;
  r.action = fault_action::fail_at_completion;
  p.rules.push_back(r);
  auto a = fault_injector::make(p);
  auto b = fault_injector::make(p);
  p.seed = 43;
  auto c = fault_injector::make(p);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  int fired = 0, same_as_other_seed = 0;
  for (int k = 0; k < 2000; ++k) {
    const auto da = a->next(fault_target::store);
    const auto db = b->next(fault_target::store);
    const auto dc = c->next(fault_target::store);
    ASSERT_EQ(da.action, db.action) << "draw " << k;
    EXPECT_EQ(a->next(fault_target::load).action, fault_action::none) << "loads are not watched";
    fired += da.action != fault_action::none;
    same_as_other_seed += da.action == dc.action;
  }
  EXPECT_GT(fired, 500);
  EXPECT_LT(fired, 700);
  EXPECT_LT(same_as_other_seed, 2000) << "another seed gives other decisions";
}

TEST(FaultInjectorTest, MaxFiresLimitsARule) {
  fault_plan p;
  fault_rule r;
  r.trigger = fault_trigger::probability;
  r.probability = 1.0;
  r.action = fault_action::fail_at_submit;
  r.max_fires = 2;
  p.rules.push_back(r);
  auto inj = fault_injector::make(p);
  ASSERT_TRUE(inj.ok());
  EXPECT_EQ(inj->next(fault_target::load).action, fault_action::fail_at_submit);
  EXPECT_EQ(inj->next(fault_target::store).action, fault_action::fail_at_submit);
  EXPECT_EQ(inj->next(fault_target::store).action, fault_action::none);
}

class FaultyCopyEngineTest : public testing::Test {
 protected:
  void make(fault_plan plan) {
    auto e = faulty_copy_engine::make(std::make_unique<sim_copy_engine>(), std::move(plan));
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(e).value();
    auto buf = engine_->allocate_device(8192);
    ASSERT_TRUE(buf.ok());
    gpu_ = static_cast<std::byte*>(buf->data);
  }
  result<transfer_id> submit(direction dir, size_t slot) {
    copy_op op = dir == direction::gpu_to_cpu
                     ? copy_op{gpu_ + slot * 256, host_.data() + slot * 256, 256}
                     : copy_op{host_.data() + slot * 256, gpu_ + slot * 256, 256};
    return engine_->submit(dir, std::span(&op, 1));
  }
  /// Waits on the target directly: the copy is finished there, the decorator not asked.
  void finish_in_target(transfer_id id) {
    ASSERT_TRUE(engine_->target().wait(std::span(&id, 1)).ok());
  }

  std::unique_ptr<faulty_copy_engine> engine_;
  std::byte* gpu_ = nullptr;
  std::vector<std::byte> host_ = std::vector<std::byte>(8192, std::byte{0x11});
};

TEST_F(FaultyCopyEngineTest, NameShowsTheTarget) {
  make({});
  EXPECT_EQ(engine_->name(), "faulty(sim)");
  EXPECT_EQ(faulty_copy_engine::make(nullptr, {}).code(), errc::invalid_argument);
  fault_plan bad;
  bad.rules.push_back(nth_rule(fault_target::any, 0, fault_action::none));
  EXPECT_EQ(faulty_copy_engine::make(std::make_unique<sim_copy_engine>(), bad).code(),
            errc::invalid_argument);
}

TEST_F(FaultyCopyEngineTest, FailAtSubmitRefusesTheNthStoreAndCopiesNothing) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 1, fault_action::fail_at_submit));
  make(p);
  auto s0 = submit(direction::gpu_to_cpu, 0);
  auto l0 = submit(direction::cpu_to_gpu, 10);
  auto s1 = submit(direction::gpu_to_cpu, 1);
  auto s2 = submit(direction::gpu_to_cpu, 2);
  ASSERT_TRUE(s0.ok() && l0.ok() && s2.ok());
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.code(), errc::injected_fault);
  EXPECT_NE(s1.error().message().find("fail_at_submit"), std::string::npos);
  const std::vector<transfer_id> ids{*s0, *l0, *s2};
  ASSERT_TRUE(engine_->wait(ids).ok());
  EXPECT_EQ(host_[256], std::byte{0x11}) << "the refused store must not have run";
  EXPECT_EQ(host_[0], std::byte{0xCD});
  EXPECT_EQ(engine_->take_finished().size(), 3u);
}

TEST_F(FaultyCopyEngineTest, FailAtCompletionReportsInjectedFault) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::load, 0, fault_action::fail_at_completion));
  make(p);
  auto l0 = submit(direction::cpu_to_gpu, 0);
  auto l1 = submit(direction::cpu_to_gpu, 1);
  ASSERT_TRUE(l0.ok() && l1.ok());
  const std::vector<transfer_id> ids{*l0, *l1};
  ASSERT_TRUE(engine_->wait(ids).ok()) << "wait reports finishing, not success";
  EXPECT_EQ(engine_->poll(*l0), poll_state::failed);
  EXPECT_EQ(engine_->poll(*l1), poll_state::done);
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].id, *l0);
  EXPECT_FALSE(reports[0].ok);
  EXPECT_EQ(reports[0].error, errc::injected_fault);
  EXPECT_NE(reports[0].detail.find("fail_at_completion"), std::string::npos) << reports[0].detail;
  EXPECT_TRUE(reports[1].ok);
  EXPECT_EQ(reports[1].error, errc::ok);
  EXPECT_EQ(reports[1].detail, "");
}

TEST_F(FaultyCopyEngineTest, DelayHoldsUntilMoreTransfersWereSubmitted) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 0, fault_action::delay, /*release_after=*/2));
  make(p);
  auto s0 = submit(direction::gpu_to_cpu, 0);
  ASSERT_TRUE(s0.ok());
  finish_in_target(*s0);
  EXPECT_EQ(engine_->poll(*s0), poll_state::pending);
  EXPECT_EQ(engine_->held(), 1u);
  auto s1 = submit(direction::gpu_to_cpu, 1);
  ASSERT_TRUE(s1.ok());
  finish_in_target(*s1);
  EXPECT_EQ(engine_->poll(*s0), poll_state::pending);
  EXPECT_EQ(engine_->poll(*s1), poll_state::pending) << "FIFO: held behind the delayed store";
  EXPECT_TRUE(engine_->take_finished().empty());
  auto l0 = submit(direction::cpu_to_gpu, 5);  // the 2nd transfer after s0: releases it
  ASSERT_TRUE(l0.ok());
  EXPECT_EQ(engine_->held(), 0u);
  EXPECT_EQ(engine_->poll(*s0), poll_state::done);
  EXPECT_EQ(engine_->poll(*s1), poll_state::done);
  ASSERT_TRUE(engine_->wait(std::span(&*l0, 1)).ok());
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].id, *s0);
  EXPECT_EQ(reports[1].id, *s1);
  EXPECT_EQ(reports[2].id, *l0);
}

TEST_F(FaultyCopyEngineTest, DelayWithoutCountHoldsUntilReleased) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 0, fault_action::delay));
  make(p);
  auto s0 = submit(direction::gpu_to_cpu, 0);
  ASSERT_TRUE(s0.ok());
  finish_in_target(*s0);
  for (size_t k = 0; k < 4; ++k) {
    auto l = submit(direction::cpu_to_gpu, 10 + k);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE(engine_->wait(std::span(&*l, 1)).ok()) << "loads are not held by a store";
  }
  EXPECT_EQ(engine_->poll(*s0), poll_state::pending);
  EXPECT_EQ(engine_->take_finished().size(), 4u);
  EXPECT_TRUE(engine_->release(*s0));
  EXPECT_FALSE(engine_->release(*s0)) << "already released";
  EXPECT_EQ(engine_->poll(*s0), poll_state::done);
}

TEST_F(FaultyCopyEngineTest, WaitReleasesHeldTransfers) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 0, fault_action::delay));
  make(p);
  auto s0 = submit(direction::gpu_to_cpu, 0);
  auto s1 = submit(direction::gpu_to_cpu, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  ASSERT_TRUE(engine_->wait(std::span(&*s1, 1)).ok()) << "waiting on s1 releases s0 ahead of it";
  EXPECT_EQ(engine_->poll(*s0), poll_state::done);
  EXPECT_EQ(engine_->poll(*s1), poll_state::done);
  EXPECT_EQ(engine_->release_all(), 0u);
}

TEST_F(FaultyCopyEngineTest, ProbabilityPlanReplaysTheSameFailures) {
  auto run = [&](uint64_t seed) {
    fault_plan p;
    p.seed = seed;
    fault_rule r;
    r.trigger = fault_trigger::probability;
    r.probability = 0.5;
    r.action = fault_action::fail_at_submit;
    p.rules.push_back(r);
    make(p);
    std::vector<bool> refused;
    for (size_t k = 0; k < 16; ++k) refused.push_back(!submit(direction::gpu_to_cpu, k).ok());
    (void)engine_->take_finished();
    return refused;
  };
  const auto first = run(7);
  EXPECT_EQ(run(7), first);
  EXPECT_NE(std::count(first.begin(), first.end(), true), 0);
  EXPECT_NE(std::count(first.begin(), first.end(), false), 0);
}

// lose_device behaves as the cuda backend after a sticky error: the transfer that hit it and
// every one not yet reported fail with device_unavailable, later submits never reach the
// target, and health() names the fault.
TEST_F(FaultyCopyEngineTest, LoseDeviceFailsWhatIsInFlightAndEverySubmitAfter) {
  fault_plan p;
  p.rules.push_back(nth_rule(fault_target::store, 1, fault_action::lose_device));
  make(p);
  EXPECT_TRUE(engine_->health().ok());
  auto s0 = submit(direction::gpu_to_cpu, 0);
  ASSERT_TRUE(s0.ok());
  ASSERT_TRUE(engine_->wait(std::span(&*s0, 1)).ok());
  auto before = engine_->take_finished();  // reported before the loss: stays ok
  ASSERT_EQ(before.size(), 1u);
  EXPECT_TRUE(before[0].ok);

  auto l0 = submit(direction::cpu_to_gpu, 10);  // in flight when the device is lost
  ASSERT_TRUE(l0.ok());
  auto s1 = submit(direction::gpu_to_cpu, 1);  // store #1: the device is lost here
  ASSERT_TRUE(s1.ok()) << "the transfer that hits the loss is accepted and reports failed";
  const status health = engine_->health();
  EXPECT_EQ(health.code(), errc::device_unavailable);
  EXPECT_EQ(health.message(),
            "device unusable since injected fault: lose_device (rule 0, store #1)");

  auto later = submit(direction::gpu_to_cpu, 2);
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.code(), errc::device_unavailable);
  EXPECT_EQ(engine_->injector().seen(fault_target::any), 3u) << "a refused submit draws nothing";

  const std::vector<transfer_id> ids{*l0, *s1};
  ASSERT_TRUE(engine_->wait(ids).ok());
  auto after = engine_->take_finished();
  ASSERT_EQ(after.size(), 2u);
  for (const transfer_report& r : after) {
    EXPECT_FALSE(r.ok) << r.id;
    EXPECT_EQ(r.error, errc::device_unavailable) << r.id;
    EXPECT_EQ(r.detail, health.message()) << r.id;
  }
  EXPECT_EQ(engine_->injector().fired(0), 1u);
  EXPECT_EQ(host_[512], std::byte{0x11}) << "the refused store must not have run";
}

}  // namespace
}  // namespace kvc::cuda
