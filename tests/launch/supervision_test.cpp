// The launch supervisor's decisions (launch/supervisor/supervision.hpp), driven by hand with a
// manual time: the normal end, a worker's or the scheduler's unexpected exit, a forwarded signal,
// and the escalation SIGTERM → SIGKILL when children do not exit.
#include "launch/supervisor/supervision.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using order = supervision::order;

class SupervisionTest : public ::testing::Test {
 protected:
  /// The scheduler and two workers, all started.
  SupervisionTest() : sup_({"scheduler", "worker 0", "worker 1"}, 100ms) {
    for (size_t i = 0; i < 3; ++i) sup_.on_started(i);
  }
  supervision::time_point t0_{};
  supervision sup_;
};

TEST_F(SupervisionTest, TheSchedulerPassingItsSmokeRunIsTheNormalEnd) {
  sup_.on_smoke(true);
  EXPECT_THAT(sup_.on_exit(1, 0, t0_), IsEmpty());  // stopped by the scheduler
  EXPECT_FALSE(sup_.stopping());
  EXPECT_THAT(sup_.on_exit(0, 0, t0_ + 1ms), IsEmpty());
  EXPECT_TRUE(sup_.stopping());
  EXPECT_FALSE(sup_.start_workers());
  EXPECT_FALSE(sup_.finished());  // worker 1 still runs
  EXPECT_THAT(sup_.on_exit(2, 0, t0_ + 2ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 0);
  EXPECT_EQ(sup_.reason(), "the smoke run passed");
}

TEST_F(SupervisionTest, AWorkerExitingBeforeTheSmokeRunEndedStopsEveryoneAtOnce) {
  EXPECT_THAT(sup_.on_exit(2, 137, t0_), ElementsAre(order{0, SIGTERM}, order{1, SIGTERM}));
  EXPECT_TRUE(sup_.stopping());
  EXPECT_EQ(sup_.exit_code(), 1);
  EXPECT_EQ(sup_.reason(), "worker 1 exited with code 137 before the smoke run ended");
  // What follows does not change the outcome.
  EXPECT_THAT(sup_.on_exit(0, 1, t0_ + 1ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(1, 0, t0_ + 2ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 1);
}

TEST_F(SupervisionTest, AWorkerExitingCleanlyBeforeTheSmokeRunIsAFailureToo) {
  EXPECT_THAT(sup_.on_exit(1, 0, t0_), ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_EQ(sup_.exit_code(), 1);
}

TEST_F(SupervisionTest, AWorkerFailingAfterTheSmokeRunIsAFailure) {
  sup_.on_smoke(true);
  EXPECT_THAT(sup_.on_exit(1, 1, t0_), ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_EQ(sup_.reason(), "worker 0 exited with code 1");
}

TEST_F(SupervisionTest, TheSchedulerFailingStopsTheWorkers) {
  EXPECT_THAT(sup_.on_exit(0, 1, t0_), ElementsAre(order{1, SIGTERM}, order{2, SIGTERM}));
  EXPECT_EQ(sup_.exit_code(), 1);
  EXPECT_EQ(sup_.reason(), "scheduler exited with code 1 before its smoke run ended");
}

TEST_F(SupervisionTest, ASignalIsForwardedAndDecidesTheExitCode) {
  EXPECT_THAT(sup_.on_signal(SIGINT, t0_),
              ElementsAre(order{0, SIGINT}, order{1, SIGINT}, order{2, SIGINT}));
  EXPECT_EQ(sup_.exit_code(), 128 + SIGINT);
  EXPECT_EQ(sup_.reason(), "signal 2");
  // The scheduler then exits 1 (its smoke run was cut short): still the signal's code.
  EXPECT_THAT(sup_.on_exit(0, 1, t0_ + 1ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(1, 0, t0_ + 1ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(2, 0, t0_ + 1ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 130);
}

TEST_F(SupervisionTest, ChildrenThatDoNotExitGetSigtermThenSigkill) {
  sup_.on_smoke(true);
  EXPECT_THAT(sup_.on_exit(0, 0, t0_), IsEmpty());  // the workers get `grace` to exit
  ASSERT_TRUE(sup_.deadline().has_value());
  EXPECT_EQ(*sup_.deadline(), t0_ + 100ms);
  EXPECT_THAT(sup_.on_time(t0_ + 99ms), IsEmpty());
  EXPECT_THAT(sup_.on_time(t0_ + 100ms), ElementsAre(order{1, SIGTERM}, order{2, SIGTERM}));
  EXPECT_THAT(sup_.on_exit(1, 0, t0_ + 150ms), IsEmpty());
  EXPECT_THAT(sup_.on_time(t0_ + 199ms), IsEmpty());
  EXPECT_THAT(sup_.on_time(t0_ + 200ms), ElementsAre(order{2, SIGKILL}));
  EXPECT_FALSE(sup_.deadline().has_value());
  EXPECT_THAT(sup_.on_time(t0_ + 300ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(2, 137, t0_ + 300ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 0);  // the smoke run passed; the slow worker does not change it
}

TEST_F(SupervisionTest, AfterAForwardedSignalTheNextStepIsSigkill) {
  EXPECT_THAT(sup_.on_signal(SIGTERM, t0_).size(), 3u);
  EXPECT_THAT(sup_.on_time(t0_ + 100ms),
              ElementsAre(order{0, SIGKILL}, order{1, SIGKILL}, order{2, SIGKILL}));
}

TEST(SupervisionStartTest, NoWorkerStartsOnceTheSchedulerFailed) {
  supervision sup({"scheduler", "worker 0"}, 100ms);
  sup.on_started(0);
  EXPECT_TRUE(sup.start_workers());
  EXPECT_THAT(sup.on_exit(0, 1, {}), IsEmpty());  // no worker runs yet: nobody to signal
  EXPECT_FALSE(sup.start_workers());
  EXPECT_TRUE(sup.finished());  // a worker never started does not hold the launch
  EXPECT_EQ(sup.exit_code(), 1);
}

}  // namespace
}  // namespace kvc::launch

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using order = supervision::order;

/// restart.policy on-failure with restart.limit 2: the scheduler and two workers, all started.
class RestartTest : public ::testing::Test {
 protected:
  RestartTest() : sup_({"scheduler", "worker 0", "worker 1"}, 100ms, 2) {
    for (size_t i = 0; i < 3; ++i) sup_.on_started(i);
  }
  supervision::time_point t0_{};
  supervision sup_;
};

TEST_F(RestartTest, AFailedWorkerIsRestartedWithItsNextIncarnationAndTheLaunchGoesOn) {
  EXPECT_THAT(sup_.on_exit(2, 137, t0_), IsEmpty());  // nobody is stopped
  EXPECT_FALSE(sup_.stopping());
  EXPECT_THAT(sup_.take_restarts(), ElementsAre(2u));
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());  // each restart once
  EXPECT_EQ(sup_.incarnation(2), 1u);
  EXPECT_EQ(sup_.incarnation(1), 0u);
  EXPECT_EQ(sup_.restarts(), 1u);
  sup_.on_started(2);
  // The run ends normally after it.
  sup_.on_smoke(true);
  EXPECT_THAT(sup_.on_exit(0, 0, t0_ + 1ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(1, 0, t0_ + 2ms), IsEmpty());
  EXPECT_FALSE(sup_.finished());  // the restarted worker 1 runs
  EXPECT_THAT(sup_.on_exit(2, 0, t0_ + 3ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 0);
  EXPECT_EQ(sup_.restarts(), 1u);
}

TEST_F(RestartTest, TheLimitIsPerRankAndPastItTheLaunchFails) {
  for (uint32_t n = 1; n <= 2; ++n) {
    EXPECT_THAT(sup_.on_exit(1, 1, t0_), IsEmpty());
    EXPECT_THAT(sup_.take_restarts(), ElementsAre(1u));
    EXPECT_EQ(sup_.incarnation(1), n);
    sup_.on_started(1);
  }
  // Worker 1 still has its own two restarts.
  EXPECT_THAT(sup_.on_exit(2, 137, t0_), IsEmpty());
  EXPECT_THAT(sup_.take_restarts(), ElementsAre(2u));
  sup_.on_started(2);
  EXPECT_EQ(sup_.restarts(), 3u);
  // Worker 0's third failure ends the launch.
  EXPECT_THAT(sup_.on_exit(1, 1, t0_ + 1ms), ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_TRUE(sup_.stopping());
  EXPECT_EQ(sup_.exit_code(), 1);
  EXPECT_EQ(sup_.reason(),
            "worker 0 exited with code 1 before the smoke run ended (restart.limit 2 reached)");
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());
}

TEST_F(RestartTest, AStoppingLaunchRestartsNothing) {
  EXPECT_THAT(sup_.on_exit(1, 137, t0_), IsEmpty());
  // A signal before the restart was carried out: it is dropped, and the launch can finish.
  EXPECT_THAT(sup_.on_signal(SIGTERM, t0_ + 1ms),
              ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());
  EXPECT_THAT(sup_.on_exit(0, 0, t0_ + 2ms), IsEmpty());
  EXPECT_THAT(sup_.on_exit(2, 0, t0_ + 3ms), IsEmpty());
  EXPECT_TRUE(sup_.finished());
  EXPECT_EQ(sup_.exit_code(), 128 + SIGTERM);
}

TEST_F(RestartTest, AFailureAfterTheSmokeRunIsNotRestarted) {
  sup_.on_smoke(true);
  EXPECT_THAT(sup_.on_exit(1, 137, t0_), ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());
  EXPECT_EQ(sup_.exit_code(), 1);
}

TEST_F(RestartTest, ARefusedWorkerIsNotRestarted) {
  // Exit code 2: its registration was refused; the same command would be refused again.
  EXPECT_THAT(sup_.on_exit(1, 2, t0_), ElementsAre(order{0, SIGTERM}, order{2, SIGTERM}));
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());
  EXPECT_EQ(sup_.restarts(), 0u);
  EXPECT_EQ(sup_.reason(),
            "worker 0 exited with code 2 before the smoke run ended (refused: not restarted)");
}

TEST_F(RestartTest, TheSchedulerIsNeverRestarted) {
  EXPECT_THAT(sup_.on_exit(0, 137, t0_), ElementsAre(order{1, SIGTERM}, order{2, SIGTERM}));
  EXPECT_THAT(sup_.take_restarts(), IsEmpty());
  EXPECT_EQ(sup_.exit_code(), 1);
}

}  // namespace
}  // namespace kvc::launch
