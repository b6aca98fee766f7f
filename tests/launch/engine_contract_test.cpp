// The engine seam's contract (launch/engines/engine.hpp): every engine that `kvconnect launch`
// runs through the factory (engine_traits::launchable: the smoke run, the simulated engine),
// with offloading on and off and injected faults off and on, meets the same engine-independent
// contract: every rank is ready and the engine's steps all complete (workload.steps, the
// simulated engine's drain after them), no job fails, each job completes once (a duplicated
// report completes nothing twice, no job is left pending), the run exits 0 with every worker
// ended (with offloading, stopped by the scheduler; without, at the end of the executor channel),
// and nothing is left behind: no process of the launch and no shm segment (launch_fixture's
// TearDown). The combinations a launch refuses (an engine that needs offloading, injected
// faults without it) are refused before anything starts: exit 2, one sentence naming the key.
// Without offloading the simulated engine's run equals `kvconnect soak`'s run without it, figure
// for figure. Synchronisation reads the launcher's JSON lines and waits for its exit (no sleeps).
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

/// (engine name, offloading on, faults on)
using engine_case = std::tuple<std::string, bool, bool>;

std::string case_name(const ::testing::TestParamInfo<engine_case>& info) {
  const auto& [engine, offload, faults] = info.param;
  return engine + (offload ? "_offload" : "_no_offload") + (faults ? "_faults" : "_no_faults");
}

class EngineContractTest : public launch_fixture,
                           public ::testing::WithParamInterface<engine_case> {
 protected:
  EngineContractTest() : launch_fixture("ect") {}

  std::vector<pid_t> launched_pids() const override { return children_; }

  std::string engine() const { return std::get<0>(GetParam()); }
  bool offload() const { return std::get<1>(GetParam()); }
  bool faults() const { return std::get<2>(GetParam()); }

  void launch() {
    std::vector<std::string> argv{KVC_BINARY,
                                  "launch",
                                  "--engine",
                                  engine(),
                                  "--set",
                                  "runtime.instance=" + instance_,
                                  "--set",
                                  "workload.steps=" + std::to_string(steps),
                                  "--set",
                                  std::string{"offload.enabled="} + (offload() ? "true" : "false")};
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
  if (offload()) {
    EXPECT_THAT(launcher_.stderr_text(), HasSubstr("[scheduler] stopped (2 workers)"));
  } else {
    // No connector, no pool: nothing was offloaded, and every rank ran every step's forward.
    EXPECT_TRUE(s.at("segment").is_null()) << s.dump();
    EXPECT_TRUE(started.at("segment").is_null()) << started.dump();
    EXPECT_EQ(s.at("offload"), false) << s.dump();
    EXPECT_EQ(s.at("bytes_stored"), 0) << s.dump();
    EXPECT_EQ(s.at("ranks_reported"), 2) << s.dump();
    EXPECT_EQ(s.at("step_errors"), 0) << s.dump();
  }
  // TearDown: no process of the launch, no segment of the instance.
}

// What a launch runs: both engines with offloading, faults off and on; the simulated engine
// without offloading (no faults: they need the connector).
INSTANTIATE_TEST_SUITE_P(Engines, EngineContractTest,
                         ::testing::Values(engine_case{"smoke", true, false},
                                           engine_case{"smoke", true, true},
                                           engine_case{"sim", true, false},
                                           engine_case{"sim", true, true},
                                           engine_case{"sim", false, false}),
                         case_name);

/// The combinations a launch refuses: exit 2 before anything starts, one sentence naming the
/// key.
class EngineRefusalTest : public EngineContractTest {};

TEST_P(EngineRefusalTest, IsRefusedNamingTheKeyAndNothingStarts) {
  launch();
  const auto code = launcher_.wait_exit(patience);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << launcher_.stderr_text();
  EXPECT_THAT(launcher_.stdout_text(), ::testing::Not(HasSubstr("\"started\"")));
  // An engine that needs offloading is refused for that first; the simulated engine for faults.
  const std::string key = engine() == "sim" ? "runtime.faults: offload.enabled is false"
                                            : "offload.enabled is false: engine " + engine();
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr(key));
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("nothing started"));
}

// The smoke run is all store/load round trips through the pool; injected faults act on the
// connector. Neither runs without offloading.
INSTANTIATE_TEST_SUITE_P(Engines, EngineRefusalTest,
                         ::testing::Values(engine_case{"smoke", false, false},
                                           engine_case{"smoke", false, true},
                                           engine_case{"sim", false, true}),
                         case_name);

/// The summary's figures of the simulated engine's run: what the workload and the engine's
/// decisions give (no wall-clock time).
constexpr const char* run_figures[] = {
    "steps",          "requests_arrived",        "requests_finished", "requests_aborted",
    "output_tokens",  "prefill_tokens_computed", "gpu_hit_tokens",    "cpu_hit_tokens",
    "preemptions",    "sim_seconds",             "ttft_p50_ms",       "ttft_p99_ms",
    "hung_requests",  "output_tokens_per_s",     "bytes_stored",      "offload"};

class NoOffloadParityTest : public launch_fixture {
 protected:
  NoOffloadParityTest() : launch_fixture("nop") {}
  std::vector<pid_t> launched_pids() const override { return children_; }
  std::vector<pid_t> children_;
};

// The launch without offloading (scheduler and worker processes, the model input on the executor
// channel) is the in-process run without offloading of `kvconnect soak` (soak --compare's
// reference) for the same seed: the same requests finish with the same tokens at the same
// simulated times.
TEST_F(NoOffloadParityTest, LaunchWithoutOffloadingEqualsTheInProcessRunWithoutIt) {
  const std::vector<std::string> common{"--set", "workload.steps=" + std::to_string(steps),
                                        "--set", "workload.seed=5", "--set",
                                        "offload.enabled=false"};
  std::vector<std::string> launch_argv{KVC_BINARY, "launch", "--set",
                                       "runtime.instance=" + instance_};
  launch_argv.insert(launch_argv.end(), common.begin(), common.end());
  auto l = child_process::start(launch_argv);
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  launcher_ = std::move(l).value();
  auto started = launcher_.find_stdout("\"started\"", patience);
  ASSERT_TRUE(started.ok()) << launcher_.stderr_text();
  const json st = json::parse(*started);
  children_.push_back(st.at("scheduler_pid").get<pid_t>());
  for (const auto& p : st.at("worker_pids")) children_.push_back(p.get<pid_t>());
  const auto code = launcher_.wait_exit(patience);
  ASSERT_TRUE(code.ok());
  ASSERT_EQ(*code, 0) << launcher_.stderr_text();
  auto launched = launcher_.find_stdout("\"summary\"", patience);
  ASSERT_TRUE(launched.ok());

  std::vector<std::string> soak_argv{KVC_BINARY, "soak"};
  soak_argv.insert(soak_argv.end(), common.begin(), common.end());
  auto soak = child_process::start(soak_argv);
  ASSERT_TRUE(soak.ok()) << soak.error().to_string();
  auto soaked = soak->find_stdout("\"summary\"", patience);
  ASSERT_TRUE(soaked.ok()) << soak->stderr_text();
  const auto soak_code = soak->wait_exit(patience);
  ASSERT_TRUE(soak_code.ok());
  EXPECT_EQ(*soak_code, 0) << soak->stderr_text();

  const json a = json::parse(*launched);
  const json b = json::parse(*soaked);
  EXPECT_EQ(a.at("offload"), false) << a.dump();
  EXPECT_GT(a.at("requests_finished").get<uint64_t>(), 0u) << a.dump();
  EXPECT_EQ(a.at("load_mismatches"), 0) << a.dump();
  EXPECT_EQ(a.at("ranks_reported"), 2) << a.dump();
  for (const char* k : run_figures) {
    EXPECT_EQ(a.at(k), b.at(k)) << k << "\nlaunch: " << a.dump() << "\nsoak: " << b.dump();
  }
}

// No connector sees a rank go and come back without offloading: restarts are refused before
// anything starts.
TEST_F(NoOffloadParityTest, RestartsAreRefusedWithoutOffloading) {
  auto l = child_process::start({KVC_BINARY, "launch", "--set", "runtime.instance=" + instance_,
                                 "--set", "offload.enabled=false", "--set",
                                 "topology.restart.policy=on-failure"});
  ASSERT_TRUE(l.ok()) << l.error().to_string();
  launcher_ = std::move(l).value();
  const auto code = launcher_.wait_exit(patience);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2) << launcher_.stderr_text();
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("topology.restart.policy: on-failure: offload.enabled is false"));
  EXPECT_THAT(launcher_.stdout_text(), ::testing::Not(HasSubstr("\"started\"")));
}

}  // namespace
}  // namespace kvc::launch
