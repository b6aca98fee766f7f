// The chaos test: `kvconnect launch launch/examples/tp4.yaml` (TP=4, restart.policy on-failure)
// on the simulated engine with process faults that the launcher carries out at a step of the
// scheduler's progress: a rank SIGKILLed, a rank SIGSTOPped for less or for longer than
// runtime.connection_timeout_ms, the scheduler SIGKILLed. Synchronisation reads the
// launcher's JSON lines and waits for its exit (no sleeps); TearDown checks that no process
// and no /dev/shm segment of the launch is left.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/launch_fixture.hpp"
#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::child_process;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 90s;
/// The engine the chaos runs use: "sim" (the simulated engine), or "smoke".
const std::string engine = "sim";

class ChaosMultiprocTest : public launch_fixture {
 protected:
  ChaosMultiprocTest() : launch_fixture("chaos") {}

  std::vector<pid_t> launched_pids() const override { return pids(); }

  /// `kvconnect launch tp4.yaml` with this test's instance and `extra`.
  void launch(const std::vector<std::string>& extra) {
    std::vector<std::string> argv{KVC_BINARY,
                                  "launch",
                                  KVC_SOURCE_DIR "/launch/examples/tp4.yaml",
                                  "--engine",
                                  engine,
                                  "--set",
                                  "runtime.instance=" + instance_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = child_process::start(argv);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    launcher_ = std::move(c).value();
  }

  /// Every stdout line of the launcher with `"event":"<event>"`, parsed.
  std::vector<json> lines(const std::string& event) const {
    std::vector<json> out;
    std::istringstream in(launcher_.stdout_text());
    for (std::string l; std::getline(in, l);) {
      if (l.find("\"event\":\"" + event + "\"") == std::string::npos) continue;
      out.push_back(json::parse(l));
    }
    return out;
  }

  /// Every process the launch started, from its "started" and "restarted" lines.
  std::vector<pid_t> pids() const {
    std::vector<pid_t> out;
    for (const auto& s : lines("started")) {
      if (s.at("scheduler_pid").is_number()) out.push_back(s.at("scheduler_pid").get<pid_t>());
      for (const auto& p : s.at("worker_pids")) out.push_back(p.get<pid_t>());
    }
    for (const auto& r : lines("restarted")) out.push_back(r.at("pid").get<pid_t>());
    return out;
  }

  int exit_code() {
    auto code = launcher_.wait_exit(patience);
    return code.ok() ? *code : -1;
  }

  json last(const std::string& event) {
    const auto all = lines(event);
    EXPECT_FALSE(all.empty()) << "no " << event << " line: " << launcher_.stderr_text();
    return all.empty() ? json{} : all.back();
  }

};

TEST_F(ChaosMultiprocTest, AKilledRankAndAShortHangRecoverAndTheRunCompletes) {
  // The hang (300 ms) is far shorter than runtime.connection_timeout_ms (raised to 5000 so that
  // a loaded host cannot stretch it past): the rank is slow, not lost; the killed rank is
  // restarted and rejoins as incarnation 1 (a closed connection is lost at once).
  launch({"--set", "runtime.connection_timeout_ms=5000", "--fault", "kill_rank:rank=2,step=20",
          "--fault", "hang_rank:rank=1,step=50,resume=300"});
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const auto faults = lines("fault");
  ASSERT_EQ(faults.size(), 2u) << launcher_.stdout_text();
  EXPECT_EQ(faults[0].at("kind"), "kill_rank");
  EXPECT_EQ(faults[0].at("rank"), 2);
  EXPECT_GE(faults[0].at("step").get<uint64_t>(), 20u);
  EXPECT_EQ(faults[1].at("kind"), "hang_rank");
  EXPECT_EQ(faults[1].at("rank"), 1);
  const auto rejoined = lines("rejoined");
  ASSERT_EQ(rejoined.size(), 1u) << launcher_.stdout_text();
  EXPECT_EQ(rejoined[0].at("rank"), 2);
  EXPECT_EQ(rejoined[0].at("incarnation"), 1);
  const json report = last("fault_report");
  EXPECT_EQ(report.at("fired").at("kill_rank"), 1);
  EXPECT_EQ(report.at("fired").at("hang_rank"), 1);
  EXPECT_EQ(report.at("fired").at("kill_scheduler"), 0);
  EXPECT_EQ(report.at("invariants_ok"), true) << report.dump();
  const json s = last("summary");
  EXPECT_EQ(s.at("ok"), true) << s.dump();
  EXPECT_EQ(s.at("restarts"), 1);
  EXPECT_EQ(s.at("load_mismatches"), 0);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("SIGCONT to the worker 1"));
  // Progress lines drive the faults but are not relayed to stderr.
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("\"event\":\"progress\"")));
}

TEST_F(ChaosMultiprocTest, AHangPastTheConnectionTimeoutIsLostKilledAndRestarted) {
  // Never continued: the scheduler declares rank 1 lost, the launcher kills the stopped
  // process and restarts it.
  launch({"--fault", "hang_rank:rank=1,step=30"});
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const auto rejoined = lines("rejoined");
  ASSERT_EQ(rejoined.size(), 1u) << launcher_.stdout_text();
  EXPECT_EQ(rejoined[0].at("rank"), 1);
  EXPECT_EQ(rejoined[0].at("incarnation"), 1);
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("the scheduler lost the stopped worker 1: SIGKILL"));
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("[scheduler] rank 1 (incarnation 0) is lost"));
  const json report = last("fault_report");
  EXPECT_EQ(report.at("fired").at("hang_rank"), 1);
  EXPECT_EQ(report.at("invariants_ok"), true) << report.dump();
  const json s = last("summary");
  EXPECT_EQ(s.at("ok"), true) << s.dump();
  EXPECT_EQ(s.at("restarts"), 1);
}

TEST_F(ChaosMultiprocTest, ALostDeviceEndsTheRankWhichRestartsAndTheRunCompletes) {
  // Rank 1's device is lost at its 10th store (as after a sticky CUDA error): that store and
  // what was in flight fail with the cause in their detail, the worker reports the step, exits
  // with code 4 and is restarted (on-failure) with a new device; the run completes verified.
  launch({"--fault", "lose_device:rank=1,dir=store,nth=10"});
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const auto lost = lines("device_lost");
  ASSERT_EQ(lost.size(), 1u) << launcher_.stdout_text();
  EXPECT_EQ(lost[0].at("rank"), 1);
  EXPECT_EQ(lost[0].at("incarnation"), 0);
  EXPECT_EQ(lost[0].at("detail"),
            "device unusable since injected fault: lose_device (rule 0, store #10)");
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("exited with code 4"));
  const auto rejoined = lines("rejoined");
  ASSERT_EQ(rejoined.size(), 1u) << launcher_.stdout_text();
  EXPECT_EQ(rejoined[0].at("rank"), 1);
  EXPECT_EQ(rejoined[0].at("incarnation"), 1);  // the new incarnation loses no device
  // The scheduler logged the failed store with the rank and the cause.
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("(store) failed: device_unavailable: rank 1: device unusable since "
                        "injected fault: lose_device (rule 0, store #10)"));
  const json report = last("fault_report");
  EXPECT_EQ(report.at("fired").at("lose_device"), 1);
  EXPECT_EQ(report.at("invariants_ok"), true) << report.dump();
  const json s = last("summary");
  EXPECT_EQ(s.at("ok"), true) << s.dump();
  EXPECT_EQ(s.at("restarts"), 1);
  EXPECT_EQ(s.at("load_mismatches"), 0);
}

TEST_F(ChaosMultiprocTest, AKilledSchedulerLeavesWorkersThatExitOnTheirOwn) {
  launch({"--fault", "kill_scheduler:step=20", "--set", "workload.steps=4000000000"});
  EXPECT_EQ(exit_code(), 1) << launcher_.stderr_text();
  const json report = last("fault_report");
  EXPECT_EQ(report.at("fired").at("kill_scheduler"), 1);
  EXPECT_EQ(report.at("workers_exited_on_their_own"), true) << launcher_.stderr_text();
  EXPECT_EQ(report.at("invariants_ok"), true);
  const json s = last("summary");
  EXPECT_EQ(s.at("exit_code"), 1);
  EXPECT_EQ(s.at("segment_left"), true);  // removed by the launcher
  EXPECT_THAT(s.at("reason").get<std::string>(), HasSubstr("scheduler exited with code 137"));
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("did not exit within")));
  // TearDown: every worker is gone, the segment too.
}

TEST_F(ChaosMultiprocTest, ARunEndedWithHungRequestsBreaksTheInvariantsInBothReports) {
  // Issue 23: a run that failed with 61 hung requests in its summary had a fault report with
  // none and invariants_ok true. Here a killed rank without restarts ends a run that would go
  // on for good, with every request arrived at step 1: requests are left hung, and both lines
  // say so.
  launch({"--fault", "kill_rank:rank=2,step=5", "--set", "topology.restart.policy=never", "--set",
          "workload.steps=4000000000", "--set", "workload.arrival_rate=0"});
  EXPECT_EQ(exit_code(), 3) << launcher_.stderr_text();
  const json report = last("fault_report");
  const json s = last("summary");
  ASSERT_TRUE(s.contains("hung_requests")) << s.dump();
  EXPECT_GT(s.at("hung_requests").get<uint64_t>(), 0u) << s.dump();
  EXPECT_EQ(report.at("hung_requests"), s.at("hung_requests")) << report.dump();
  EXPECT_EQ(report.at("pending_jobs"), s.at("pending_jobs"));
  EXPECT_EQ(report.at("invariants_ok"), false) << report.dump();
  EXPECT_EQ(s.at("exit_code"), 3);
  EXPECT_EQ(s.at("ok"), false);
}

TEST_F(ChaosMultiprocTest, AProcessFaultOnAnotherNodesRankIsRefused) {
  launch({"--fault", "kill_rank:rank=3,step=2", "--set", "topology.tensor_parallel=2"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("rank 3 is not on node 0"));
  EXPECT_TRUE(lines("started").empty());
}

}  // namespace
}  // namespace kvc::launch
