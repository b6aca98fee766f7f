// The engine seam's contract (launch/engines/engine.hpp): every engine that `kvconnect launch`
// runs through the factory (engine_traits::launchable: the smoke run, the simulated engine),
// with injected faults off and on, meets the same engine-independent contract: every rank
// registers and the engine's steps all complete (workload.steps, the simulated engine's drain
// after them), no job fails, each job completes once (a duplicated report completes nothing
// twice, no job is left pending), the run exits 0 with every worker stopped by the scheduler, and
// nothing is left behind: no process of the launch and no shm segment (launch_fixture's TearDown).
// Offload on only: a launch refuses offload.enabled false (`soak --compare` runs the simulated
// engine without it, in one process). Synchronisation reads the launcher's JSON lines and waits for
// its exit (no sleeps).
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/launch_fixture.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::child_process;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 60s;
constexpr uint64_t steps = 40;

/// (engine name, faults on)
using engine_case = std::tuple<std::string, bool>;

class EngineContractTest : public launch_fixture,
                           public ::testing::WithParamInterface<engine_case> {
 protected:
  EngineContractTest() : launch_fixture("ect") {}

  std::vector<pid_t> launched_pids() const override { return children_; }

  std::string engine() const { return std::get<0>(GetParam()); }
  bool faults() const { return std::get<1>(GetParam()); }

  void launch() {
    std::vector<std::string> argv{KVC_BINARY, "launch",
                                  "--engine", engine(),
                                  "--set",    "runtime.instance=" + instance_,
                                  "--set",    "workload.steps=" + std::to_string(steps)};
    if (faults()) {
      // Faults that lose nothing: a duplicated report (dropped), held copies (released when the
      // worker waits for them).
      argv.insert(argv.end(), {"--fault", "duplicate_report:nth=3", "--fault", "delay_copy:p=0.5",
                               "--fault-seed", "11"});
    }
    auto c = child_process::start(argv);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    launcher_ = std::move(c).value();
  }

  json line(const std::string& event) {
    auto l = launcher_.find_stdout("\"" + event + "\"", patience);
    EXPECT_TRUE(l.ok()) << event << ": " << launcher_.stderr_text();
    return l ? json::parse(*l) : json{};
  }

  std::vector<pid_t> children_;
};

TEST_P(EngineContractTest, EveryStepCompletesEveryJobOnceAndNothingIsLeft) {
  launch();
  const json started = line("started");
  ASSERT_FALSE(started.is_null());
  children_.push_back(started.at("scheduler_pid").get<pid_t>());
  for (const auto& p : started.at("worker_pids")) children_.push_back(p.get<pid_t>());
  ASSERT_EQ(started.at("worker_pids").size(), 2u);  // the embedded default: TP=2
  const json ready = line("ready");
  EXPECT_FALSE(ready.is_null());
  const auto code = launcher_.wait_exit(patience);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << launcher_.stderr_text();
  if (faults()) {
    const json report = line("fault_report");
    EXPECT_EQ(report.at("fired").at("duplicate_report"), 1) << report.dump();
    // No job completed twice; the duplicate's job results (a report without any counts none)
    // were dropped.
    EXPECT_EQ(report.at("double_completions"), 0) << report.dump();
    EXPECT_LE(report.at("duplicates_dropped").get<uint64_t>(), 1u) << report.dump();
    EXPECT_EQ(report.at("pending_jobs"), 0) << report.dump();
    EXPECT_EQ(report.at("jobs_failed"), 0) << report.dump();
    EXPECT_EQ(report.at("invariants_ok"), true) << report.dump();
  } else {
    EXPECT_THAT(launcher_.stdout_text(), ::testing::Not(HasSubstr("\"fault_report\"")));
  }
  const json s = line("summary");
  EXPECT_EQ(s.at("ok"), true) << s.dump();
  EXPECT_EQ(s.at("exit_code"), 0);
  EXPECT_EQ(s.at("ranks"), 2);
  EXPECT_EQ(s.at("restarts"), 0);
  EXPECT_EQ(s.at("segment_left"), false);  // the scheduler removed its segment itself
  EXPECT_GE(s.at("steps").get<uint64_t>(), steps) << s.dump();  // the sim engine drains after
  EXPECT_EQ(s.at("jobs_failed"), 0) << s.dump();
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("[scheduler] stopped (2 workers)"));
  // TearDown: no process of the launch, no segment of the instance.
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineContractTest,
                         ::testing::Combine(::testing::Values("smoke", "sim"), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<engine_case>& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_faults" : "_no_faults");
                         });

}  // namespace
}  // namespace kvc::launch
