// `kvconnect launch` as a user runs it: the real binary starts and supervises its scheduler
// and worker processes. The embedded default passes its smoke run; SIGTERM in the middle of a
// run, or a worker killed, ends the launch with no child and no segment left; a bad config
// exits 2 and starts nothing. Synchronisation reads the launcher's JSON lines and waits for
// its exit (no sleeps).
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::child_process;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 60s;

class LaunchMultiprocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    instance_ = "lmp" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    ASSERT_TRUE(leftover_segments().empty());
  }

  void TearDown() override {
    if (launcher_.running()) ADD_FAILURE() << "the launcher still runs: killed";
    launcher_ = child_process{};  // SIGKILLs and reaps it if still running
    for (pid_t pid : children_) {
      if (::kill(pid, 0) == 0 || errno != ESRCH) {
        ADD_FAILURE() << "child " << pid << " of the launch is still there: killed";
        ::kill(pid, SIGKILL);
      }
    }
    const auto left = leftover_segments();
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind: " << ::testing::PrintToString(left);
  }

  std::vector<std::string> leftover_segments() const {
    return shm::testing::shm_entries(instance_ + "-");
  }

  /// `kvconnect launch` with the smoke run unless `engine` says otherwise.
  void launch(std::vector<std::string> extra, const std::string& engine = "smoke") {
    std::vector<std::string> argv{KVC_BINARY, "launch", "--engine",
                                  engine,     "--set",  "runtime.instance=" + instance_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = child_process::start(argv);
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    launcher_ = std::move(c).value();
  }

  /// The launcher's "started" line; remembers the children's pids.
  json started() {
    auto line = launcher_.find_stdout("\"started\"", patience);
    EXPECT_TRUE(line.ok()) << launcher_.stderr_text();
    if (!line) return {};
    auto j = json::parse(*line);
    children_.push_back(j.at("scheduler_pid").get<pid_t>());
    for (const auto& p : j.at("worker_pids")) children_.push_back(p.get<pid_t>());
    return j;
  }

  int exit_code() {
    auto code = launcher_.wait_exit(patience);
    return code.ok() ? *code : -1;
  }

  json summary() {
    auto line = launcher_.find_stdout("\"summary\"", patience);
    EXPECT_TRUE(line.ok()) << launcher_.stderr_text();
    return line ? json::parse(*line) : json{};
  }

  std::string instance_;
  child_process launcher_;
  std::vector<pid_t> children_;
};

TEST_F(LaunchMultiprocTest, TheEmbeddedDefaultLaunchesAndPasses) {
  launch({});
  auto s = started();
  EXPECT_EQ(s.at("ranks"), json({0, 1}));
  EXPECT_EQ(s.at("segment").get<std::string>(),
            "/kvc-" + std::to_string(::getuid()) + "-" + instance_ + "-node0");
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("exit_code"), 0);
  EXPECT_EQ(j.at("reason"), "the smoke run passed");
  EXPECT_EQ(j.at("steps"), 200);  // workload.steps
  EXPECT_EQ(j.at("jobs_ok"), 200);
  EXPECT_EQ(j.at("slots_checked"), 133);  // steps k % 3 == 0 or 2 check a stored slot
  // Each job moves one offloaded block on both ranks: 8 layers x 16 KiB.
  EXPECT_EQ(j.at("bytes").get<uint64_t>(), 200ull * 2 * 8 * 16384);
  EXPECT_EQ(j.at("ranks"), 2);
  EXPECT_EQ(j.at("restarts"), 0);
  EXPECT_EQ(j.at("segment_left"), false);
  EXPECT_GT(j.at("wall_seconds").get<double>(), 0.0);
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("[scheduler] {\"event\":\"stopped\",\"workers\":2}"));
}

TEST_F(LaunchMultiprocTest, TheSimulatedEngineRunsTheDefaultWorkloadAndVerifiesEveryLoad) {
  // The embedded default (TP=2) with a shorter run; the workers check every load they did.
  launch({"--set", "workload.steps=120"}, "sim");
  started();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("reason"), "the simulated run passed");
  EXPECT_GE(j.at("steps").get<uint64_t>(), 120u);  // and the drain
  EXPECT_GT(j.at("requests_finished").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("blocks_stored").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("loads_verified").get<uint64_t>(), 0u) << j.dump();
  EXPECT_EQ(j.at("loads_verified").get<uint64_t>(),
            j.at("blocks_loaded").get<uint64_t>() * 2);  // one GPU block per offloaded, 2 ranks
  EXPECT_EQ(j.at("load_mismatches"), 0);
  EXPECT_EQ(j.at("jobs_failed"), 0);
  EXPECT_EQ(j.at("hung_requests"), 0);
  EXPECT_EQ(j.at("pending_jobs"), 0);
  EXPECT_EQ(j.at("ranks_reported"), 2);
  EXPECT_EQ(j.at("restarts"), 0);
  for (const char* k : {"gpu_hit_tokens", "cpu_hit_tokens", "prefill_tokens_computed",
                        "prefill_tokens_saved", "bytes_stored", "bytes_loaded", "store_gbps",
                        "load_gbps", "step_p50_us", "step_p99_us", "ttft_p50_ms"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, TheSimulatedEngineRunsTp4Pp2) {
  launch({KVC_SOURCE_DIR "/launch/examples/tp4pp2.yaml", "--set", "workload.steps=60"}, "sim");
  started();
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("ranks"), 8);
  EXPECT_EQ(j.at("ranks_reported"), 8);
  EXPECT_GT(j.at("requests_finished").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("load_mismatches"), 0);
  // Each offloaded block is 2 GPU blocks, checked on each of the 8 ranks.
  EXPECT_EQ(j.at("loads_verified").get<uint64_t>(), j.at("blocks_loaded").get<uint64_t>() * 16);
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, SigtermMidRunLeavesNoChildAndNoSegment) {
  launch({"--set", "workload.steps=4000000000"});
  started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_EQ(leftover_segments().size(), 1u);  // the run is under way
  ASSERT_TRUE(launcher_.signal(SIGTERM).ok());
  EXPECT_EQ(exit_code(), 128 + SIGTERM) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("reason"), "signal 15");
  EXPECT_TRUE(j.at("jobs_ok").is_null());  // the smoke run did not finish
  // TearDown checks that no child and no segment is left.
}

TEST_F(LaunchMultiprocTest, SigtermMidSimulatedRunLeavesNoChildAndNoSegment) {
  launch({"--set", "workload.steps=4000000000"}, "sim");
  started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_TRUE(launcher_.signal(SIGTERM).ok());
  EXPECT_EQ(exit_code(), 128 + SIGTERM) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), false);
  EXPECT_EQ(j.at("reason"), "signal 15");
  // TearDown checks that no child and no segment is left.
}

TEST_F(LaunchMultiprocTest, AWorkerKilledEndsTheLaunchAtOnce) {
  launch({"--set", "workload.steps=4000000000"});
  auto s = started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_EQ(::kill(s.at("worker_pids")[1].get<pid_t>(), SIGKILL), 0);
  EXPECT_EQ(exit_code(), 1) << launcher_.stderr_text();
  EXPECT_EQ(summary().at("reason"), "worker 1 exited with code 137 before the smoke run ended");
}

TEST_F(LaunchMultiprocTest, TheOneNodeExamplesLaunchAndPass) {
  // tp2.yaml: 2 ranks, 60 steps; tp4pp2.yaml: 8 ranks, 30 steps of 2-GPU-block offloaded blocks.
  for (const auto& [name, ranks, steps, slot] :
       {std::tuple{"tp2", 2, 60, 8u * 16384}, std::tuple{"tp4pp2", 8, 30, 2u * 8 * 16384}}) {
    SCOPED_TRACE(name);
    launch({KVC_SOURCE_DIR "/launch/examples/" + std::string(name) + ".yaml"});
    started();
    ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
    auto j = summary();
    EXPECT_EQ(j.at("ranks"), ranks);
    EXPECT_EQ(j.at("jobs_ok"), steps);
    EXPECT_EQ(j.at("bytes").get<uint64_t>(), uint64_t{slot} * ranks * steps);
    EXPECT_TRUE(leftover_segments().empty());
  }
}

TEST_F(LaunchMultiprocTest, AKilledLauncherTakesItsChildrenWithIt) {
  // The launcher's children become this process's when it dies, so that this test reaps them.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  launch({"--set", "workload.steps=4000000000"});
  started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_TRUE(launcher_.signal(SIGKILL).ok());
  EXPECT_EQ(exit_code(), 128 + SIGKILL);
  // PR_SET_PDEATHSIG: the kernel kills every child with the launcher.
  for (pid_t pid : children_) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    ASSERT_GE(fd, 0) << "child " << pid << ": " << std::strerror(errno);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, static_cast<int>(patience / 1ms)), 1) << "child " << pid << " lives";
    ::close(fd);
    int st = 0;
    EXPECT_EQ(::waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "child " << pid;
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0);
  // Nobody was left to remove the segment: the next create of the name replaces it as stale.
  for (const auto& n : leftover_segments()) ::shm_unlink(n.c_str());
}

TEST_F(LaunchMultiprocTest, LogLevelReachesEveryProcess) {
  launch({"--set", "workload.steps=10", "--set", "runtime.log_level=warn"});
  started();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  EXPECT_EQ(summary().at("jobs_ok"), 10);
  // The children log "[info]" lines at info (registrations, stops); none passed the level.
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("[info]")));
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("[scheduler] {")));
}

TEST_F(LaunchMultiprocTest, ABadConfigExitsTwoAndStartsNothing) {
  launch({"--set", "topology.tensor_parallel=0", "--set", "offload.block_size=24"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_EQ(launcher_.stdout_text(), "");
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("--set: topology.tensor_parallel: 0 is out of range: must be in [1, 256]"));
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("--set: offload.block_size: 24 tokens is not a multiple of "
                        "kv_cache.gpu_block_size 16"));
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("nothing started"));
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, AMultiNodeConfigIsRefusedBeforeAnythingStarts) {
  launch({KVC_SOURCE_DIR "/launch/examples/two-nodes.yaml"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_EQ(launcher_.stdout_text(), "");
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("a multi-node launch is not implemented yet"));
}

}  // namespace
}  // namespace kvc::launch
