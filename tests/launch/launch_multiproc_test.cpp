// `kvconnect launch` as a user runs it: the real binary starts and supervises its scheduler
// and worker processes. The embedded default passes its smoke run; SIGTERM in the middle of a
// run, or a worker killed, ends the launch with no child and no segment left; a bad config
// exits 2 and starts nothing. Synchronisation reads the launcher's JSON lines and waits for
// its exit (no sleeps).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/disk/scratch_dirs.hpp"
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
constexpr auto patience = 60s;

class LaunchMultiprocTest : public launch_fixture {
 protected:
  LaunchMultiprocTest() : launch_fixture("lmp") {}

  std::vector<pid_t> launched_pids() const override { return children_; }

  /// `kvconnect launch` with this test's instance, the smoke run unless `engine` says otherwise,
  /// and `extra`.
  std::vector<std::string> launch_argv(const std::vector<std::string>& extra,
                                       const std::string& engine = "smoke") const {
    std::vector<std::string> argv{KVC_BINARY, "launch", "--engine",
                                  engine,     "--set",  "runtime.instance=" + instance_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  void launch(std::vector<std::string> extra, const std::string& engine = "smoke") {
    auto c = child_process::start(launch_argv(extra, engine));
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

  /// $KVCONNECT_TOKEN set while it lives (the launches inherit it).
  struct token_env {
    token_env() { ::setenv("KVCONNECT_TOKEN", "two-nodes-test-token", 1); }
    ~token_env() { ::unsetenv("KVCONNECT_TOKEN"); }
  };

  /// Two distinct free TCP ports on 127.0.0.1, the kernel's picks for bind(), held together
  /// and then released for the scheduler to take. Both are set explicitly: the derived executor
  /// port (runtime.port + 1) would be an even neighbour of a bind() pick, the ports Linux hands
  /// to outgoing connections first, so another test's connection may already hold it.
  static std::pair<int, int> free_ports() {
    int fds[2];
    int ports[2];
    for (int i = 0; i < 2; ++i) {
      fds[i] = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      socklen_t len = sizeof a;
      EXPECT_EQ(::bind(fds[i], reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      EXPECT_EQ(::getsockname(fds[i], reinterpret_cast<sockaddr*>(&a), &len), 0);
      ports[i] = ntohs(a.sin_port);
    }
    for (int fd : fds) ::close(fd);
    return {ports[0], ports[1]};
  }

  /// `kvconnect launch two-nodes.yaml` (127.0.0.1 and 127.0.0.2) with this test's instance and
  /// free step and executor ports, without --node.
  std::vector<std::string> two_nodes_argv(std::vector<std::string> extra) const {
    const auto [step_port, executor_port] = free_ports();
    std::vector<std::string> argv{KVC_SOURCE_DIR "/launch/examples/two-nodes.yaml",
                                  "--set",
                                  "runtime.port=" + std::to_string(step_port),
                                  "--set",
                                  "runtime.executor_port=" + std::to_string(executor_port)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  static std::vector<std::string> with_node(std::vector<std::string> argv, int node) {
    argv.insert(argv.end(), {"--node", std::to_string(node)});
    return argv;
  }

  static std::string segment_of(const std::string& instance) {
    return "/kvc-" + std::to_string(::getuid()) + "-" + instance + "-node0";
  }

  /// A one-rank scheduler process of `instance`, its segment created ("listening").
  static child_process start_scheduler(const std::string& instance) {
    auto c = child_process::start({KVC_BINARY, "scheduler", "--instance", instance, "--tp-size",
                                   "1", "--slots", "8", "--kv-page-bytes", "256", "--gpu-blocks",
                                   "16", "--block-factor", "2", "--kv-layers", "2", "--token",
                                   "cleanup-test"});
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    if (!c) return {};
    EXPECT_TRUE(c->find_stdout("\"listening\"", patience).ok()) << c->stderr_text();
    return std::move(c).value();
  }

  /// A segment whose creator is gone: its scheduler process was SIGKILLed.
  static void leave_stale_segment(const std::string& instance) {
    child_process s = start_scheduler(instance);
    ASSERT_TRUE(s.signal(SIGKILL).ok());
    auto code = s.wait_exit(patience);
    ASSERT_TRUE(code.ok());
    ASSERT_EQ(*code, 128 + SIGKILL);
  }

  json summary() {
    auto line = launcher_.find_stdout("\"summary\"", patience);
    EXPECT_TRUE(line.ok()) << launcher_.stderr_text();
    return line ? json::parse(*line) : json{};
  }

  /// Starts node 1 of the two-node `argv` (engine `engine`) as `node`; `started_line` is its
  /// "started" line, and its workers join children_.
  void start_node1(const std::vector<std::string>& argv, const std::string& engine,
                   child_process& node, json& started_line) {
    auto c = child_process::start(launch_argv(with_node(argv, 1), engine));
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    node = std::move(c).value();
    auto line = node.find_stdout("\"started\"", patience);
    ASSERT_TRUE(line.ok()) << node.stderr_text();
    started_line = json::parse(*line);
    for (const auto& p : started_line.at("worker_pids")) children_.push_back(p.get<pid_t>());
  }

  /// Waits for node 1's launch to exit with 0; `summary_line` is its "summary" line.
  static void node1_summary(child_process& node, json& summary_line) {
    auto code = node.wait_exit(patience);
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 0) << node.stderr_text();
    auto line = node.find_stdout("\"summary\"", patience);
    ASSERT_TRUE(line.ok());
    summary_line = json::parse(*line);
  }

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
  EXPECT_GT(j.at("first_step_seconds").get<double>(), 0.0);
  EXPECT_LE(j.at("first_step_seconds").get<double>(), j.at("wall_seconds").get<double>());
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("[scheduler] stopped (2 workers)"));
}

TEST_F(LaunchMultiprocTest, FaultsThatLoseNothingPassAndAreReportedByEachProcess) {
  // A duplicated report is ignored; a held copy is released when the worker waits for it. At
  // log level debug the children's raw lines are relayed (at info: one sentence each).
  launch({"--fault", "duplicate_report:nth=3", "--fault", "delay_copy:p=0.5", "--fault-seed", "11",
          "--set", "workload.steps=40", "--set", "runtime.log_level=debug"});
  started();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  EXPECT_EQ(summary().at("jobs_ok"), 40);
  const std::string err = launcher_.stderr_text();
  const std::string tag = "[scheduler] {\"event\":\"fault_report\"";
  const size_t at = err.find(tag);
  ASSERT_NE(at, std::string::npos) << err;
  const size_t begin = err.find('{', at);
  auto report = json::parse(err.substr(begin, err.find('\n', begin) - begin));
  EXPECT_EQ(report.at("seed"), 11);
  EXPECT_EQ(report.at("fired").at("duplicate_report"), 1);
  EXPECT_EQ(report.at("fired").at("delay_copy"), 0);  // the workers' own, not the channel's
  EXPECT_EQ(report.at("jobs_failed"), 0);
  EXPECT_EQ(report.at("invariants_ok"), true);
  EXPECT_THAT(err, HasSubstr("fault injected: duplicate_report"));
  uint64_t delayed = 0;
  for (const std::string rank : {"0", "1"}) {
    const std::string stopped = "[worker " + rank + "] {\"event\":\"stopped\"";
    const size_t w = err.find(stopped);
    ASSERT_NE(w, std::string::npos) << err;
    const size_t b = err.find('{', w);
    delayed += json::parse(err.substr(b, err.find('\n', b) - b))
                   .at("fired")
                   .at("delay_copy")
                   .get<uint64_t>();
  }
  EXPECT_GT(delayed, 0u);
  // The launcher's own line: the scheduler's report with the workers' copy faults added.
  auto merged = launcher_.find_stdout("\"fault_report\"", patience);
  ASSERT_TRUE(merged.ok()) << launcher_.stderr_text();
  const json node = json::parse(*merged);
  EXPECT_EQ(node.at("fired").at("duplicate_report"), 1);
  EXPECT_EQ(node.at("fired").at("delay_copy").get<uint64_t>(), delayed);
  EXPECT_EQ(node.at("invariants_ok"), true);
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
  EXPECT_EQ(j.at("requests_finished"), j.at("requests_arrived"));  // the drain let all finish
  EXPECT_EQ(j.at("requests_aborted"), 0);
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

TEST_F(LaunchMultiprocTest, TheSimulatedEngineRunsTheFileTierAcrossItsProcesses) {
  // A pool of 16 slots per rank for six documents, a file tier under /tmp: the scheduler process
  // plans cascades and promotions, each worker process runs them on its own files, and every
  // load (from a promoted block too) is verified.
  disk::testing::scratch_dir dir{"/tmp"};
  ASSERT_FALSE(dir.path().empty());
  launch({"--set", "kv_cache.layers=2", "--set", "kv_cache.kv_heads=2", "--set",
          "kv_cache.head_dim=8", "--set", "kv_cache.gpu_blocks=96", "--set",
          "offload.cpu_bytes_to_use=64KiB", "--set", "offload.block_size=32", "--set",
          "workload.documents=6", "--set", "workload.shared_prefix_tokens.max=512", "--set",
          "workload.steps=150", "--set",
          "offload.secondary_tiers=[{root_dir: " + dir.path() + ", capacity_bytes: 4MiB}]"},
         "sim");
  started();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("load_mismatches"), 0);
  EXPECT_GT(j.at("loads_verified").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("jobs_failed"), 0);
  ASSERT_TRUE(j.contains("file_tier")) << j.dump();
  const json& t = j.at("file_tier");
  EXPECT_GT(t.at("cascaded_blocks").get<uint64_t>(), 0u) << t.dump();
  EXPECT_GT(t.at("promoted_blocks").get<uint64_t>(), 0u) << t.dump();
  EXPECT_EQ(t.at("promotions_failed"), 0);
  EXPECT_GT(t.at("bytes_read").get<uint64_t>(), 0u);
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

TEST_F(LaunchMultiprocTest, CompareRunsTheWorkloadAgainWithoutOffloading) {
  launch({"--compare", "--set", "workload.steps=120"}, "sim");
  started();
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const auto on = summary();
  auto line = launcher_.find_stdout("\"compare\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stdout_text();
  const auto cmp = json::parse(*line);
  // The launch's own summary is the run with offloading; the reference ran in process.
  EXPECT_EQ(cmp.at("offload_on"), on);
  const auto& off = cmp.at("offload_off");
  EXPECT_EQ(off.at("offload"), false);
  EXPECT_EQ(off.at("blocks_loaded"), 0);
  EXPECT_EQ(off.at("cpu_hit_tokens"), 0);
  EXPECT_GE(off.at("steps").get<uint64_t>(), 120u);  // the same workload (its follow-up turns
  EXPECT_GT(off.at("requests_finished").get<uint64_t>(), 0u);  // arrive as earlier ones end)
  // The drain lets every request finish in both runs; the figures are over those finished in
  // both (a follow-up turn arrives only in a run whose earlier turn ended in the arrival steps).
  EXPECT_EQ(on.at("requests_aborted"), 0);
  EXPECT_EQ(off.at("requests_aborted"), 0);
  const auto compared = cmp.at("requests_compared").get<uint64_t>();
  EXPECT_GT(compared, 0u);
  EXPECT_LE(compared, on.at("requests_finished").get<uint64_t>());
  EXPECT_LE(compared, off.at("requests_finished").get<uint64_t>());
  EXPECT_EQ(cmp.at("prefill_tokens_saved").get<int64_t>(),
            cmp.at("compared_off").at("prefill_tokens_computed").get<int64_t>() -
                cmp.at("compared_on").at("prefill_tokens_computed").get<int64_t>());
  EXPECT_GT(cmp.at("prefill_tokens_saved").get<int64_t>(), 0);
  for (const char* k : {"ttft_p50_ratio", "throughput_ratio", "sim_time_ratio"}) {
    EXPECT_GT(cmp.at(k).get<double>(), 0.0) << k;
  }
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("offload on vs off"));
  // The scheduler's list of finished requests is read, not relayed (a figure per request).
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("\"event\":\"finished\"")));
  // The connector's share of the launch: the scheduler's and the slowest rank's of each step.
  EXPECT_GT(on.at("scheduler_connector_ns").get<double>(), 0.0);
  EXPECT_GT(on.at("rank_connector_ns").get<double>(), 0.0);
  EXPECT_GT(on.at("connector_share").get<double>(), 0.0);
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, CompareNeedsTheSimulatedEngineOnNodeZero) {
  launch({"--compare"}, "smoke");
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("--compare: the simulated engine's run"));
  EXPECT_EQ(launcher_.stdout_text(), "");
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

TEST_F(LaunchMultiprocTest, SigintOrSigtermMidRunWithoutOffloadingLeavesNoChild) {
  for (const int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(sig);
    children_.clear();
    launch({"--set", "workload.steps=4000000000", "--set", "offload.enabled=false"}, "sim");
    started();
    ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
    ASSERT_TRUE(launcher_.signal(sig).ok());
    EXPECT_EQ(exit_code(), 128 + sig) << launcher_.stderr_text();
    const auto j = summary();
    EXPECT_EQ(j.at("ok"), false);
    EXPECT_EQ(j.at("reason"), "signal " + std::to_string(sig));
    EXPECT_TRUE(j.at("segment").is_null());
    for (const pid_t p : children_) EXPECT_NE(::kill(p, 0), 0) << "child " << p << " is left";
    EXPECT_TRUE(leftover_segments().empty());
  }
}

TEST_F(LaunchMultiprocTest, AWorkerKilledEndsTheLaunchAtOnce) {
  launch({"--set", "workload.steps=4000000000"});
  auto s = started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_EQ(::kill(s.at("worker_pids")[1].get<pid_t>(), SIGKILL), 0);
  EXPECT_EQ(exit_code(), 1) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("reason"), "worker 1 exited with code 137 before the smoke run ended");
  EXPECT_EQ(j.at("restarts"), 0);  // restart.policy never (the default)
}

TEST_F(LaunchMultiprocTest, AWorkerKilledUnderOnFailureRejoinsAndTheSimulatedRunCompletes) {
  launch({"--set", "topology.restart.policy=on-failure", "--set", "workload.steps=600"}, "sim");
  auto s = started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  const pid_t victim = s.at("worker_pids")[1].get<pid_t>();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto line = launcher_.find_stdout("\"rejoined\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stderr_text();
  const auto rejoined = json::parse(*line);
  children_.push_back(rejoined.at("pid").get<pid_t>());
  EXPECT_NE(rejoined.at("pid").get<pid_t>(), victim);
  EXPECT_EQ(rejoined.at("rank"), 1);
  EXPECT_EQ(rejoined.at("incarnation"), 1);
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("reason"), "the simulated run passed");
  EXPECT_EQ(j.at("restarts"), 1);
  EXPECT_GE(j.at("steps").get<uint64_t>(), 600u);
  // The scheduler paused until rank 1 was back and forgot the GPU prefix cache: the requests
  // that were running (how many depends on when the kill landed) are recomputed or loaded from
  // the CPU pool, and every load after the restart is verified on both ranks (the pool's data
  // survived the process).
  EXPECT_GE(j.at("gpu_cache_resets").get<uint64_t>(), 1u);
  EXPECT_TRUE(j.at("requests_recomputed").is_number_unsigned());
  EXPECT_GT(j.at("loads_verified").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("load_mismatches"), 0);
  // Every job the lost rank owed (the coordinator's count; 0 when the kill landed between two
  // of its steps) came back failed.
  const std::string err = launcher_.stderr_text();
  std::smatch owed;
  const bool owed_jobs =
      std::regex_search(err, owed, std::regex{"rank 1 lost: ([0-9]+) jobs failed"});
  EXPECT_TRUE(owed_jobs || err.find("rank 1 lost (no job waited on it)") != std::string::npos)
      << err;
  EXPECT_GE(j.at("jobs_failed").get<uint64_t>(), owed_jobs ? std::stoull(owed[1].str()) : 0u);
  EXPECT_EQ(j.at("hung_requests"), 0);
  EXPECT_EQ(j.at("pending_jobs"), 0);
  EXPECT_EQ(j.at("ranks_reported"), 2);  // rank 0 and rank 1's second process
  // Rank 1's runner line (relayed as "[worker 1] ran N steps: ...") is its second process's:
  // it ran the steps after the restart.
  std::smatch ran;
  ASSERT_TRUE(std::regex_search(err, ran, std::regex{R"(\[worker 1\] ran ([0-9]+) steps?:)"}))
      << err;
  EXPECT_GT(std::stoull(ran[1].str()), 0u);
  EXPECT_LT(std::stoull(ran[1].str()), j.at("steps").get<uint64_t>());
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("[scheduler] stopped (2 workers)"));
}

TEST_F(LaunchMultiprocTest, AWorkerKilledUnderOnFailureRejoinsAndTheSmokeRunCompletes) {
  launch({"--set", "topology.restart.policy=on-failure", "--set", "workload.steps=3000"});
  auto s = started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  const pid_t victim = s.at("worker_pids")[1].get<pid_t>();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto line = launcher_.find_stdout("\"restarted\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stderr_text();
  const auto restarted = json::parse(*line);
  children_.push_back(restarted.at("pid").get<pid_t>());
  EXPECT_NE(restarted.at("pid").get<pid_t>(), victim);
  EXPECT_EQ(restarted.at("rank"), 1);
  EXPECT_EQ(restarted.at("incarnation"), 1);
  // The new process registered as incarnation 1 with the scheduler that kept running.
  line = launcher_.find_stdout("\"rejoined\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stderr_text();
  const auto rejoined = json::parse(*line);
  EXPECT_EQ(rejoined.at("rank"), 1);
  EXPECT_EQ(rejoined.at("incarnation"), 1);
  EXPECT_EQ(rejoined.at("pid"), restarted.at("pid"));
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true);
  EXPECT_EQ(j.at("reason"), "the smoke run passed");
  EXPECT_EQ(j.at("restarts"), 1);
  EXPECT_EQ(j.at("steps"), 3000);
  // The job the lost rank owed failed (the coordinator failed the old incarnation's jobs);
  // every other step's job succeeded, and every check outside the interrupted round passed.
  EXPECT_GE(j.at("jobs_failed").get<uint64_t>(), 1u);
  EXPECT_EQ(j.at("jobs_ok").get<uint64_t>() + j.at("jobs_failed").get<uint64_t>(), 3000u);
  EXPECT_GT(j.at("slots_checked").get<uint64_t>(), 1000u);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("[scheduler] stopped (2 workers)"));
}

TEST_F(LaunchMultiprocTest, OffATerminalTheProgressLineIsPlainAndNamesTheRunsFigures) {
  // An interval of 1 ms: a line at (nearly) every step; its fields are checked, not its timing.
  launch({"--set", "workload.steps=50", "--set", "runtime.progress_interval_ms=1"}, "sim");
  started();
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const std::string err = launcher_.stderr_text();
  EXPECT_EQ(err.find('\r'), std::string::npos);  // stderr is a pipe here, not a terminal
  EXPECT_THAT(err, ::testing::ContainsRegex(
                       "kvconnect launch: progress: step [0-9]+/50, [0-9.]+ steps/s, requests "
                       "finished [0-9]+, cpu hit [0-9.]+%, jobs failed [0-9]+\n"));
  EXPECT_THAT(err, HasSubstr("progress: step 1/50, "));  // the first step always shows
}

TEST_F(LaunchMultiprocTest, AProgressIntervalOfZeroShowsNoProgressLine) {
  launch({"--set", "workload.steps=20", "--set", "runtime.progress_interval_ms=0"}, "sim");
  started();
  ASSERT_EQ(exit_code(), 0) << launcher_.stderr_text();
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("progress:")));
}

TEST_F(LaunchMultiprocTest, PastTheRestartLimitTheLaunchFailsCleanly) {
  launch({"--set", "topology.restart.policy=on-failure", "--set", "topology.restart.limit=1",
          "--set", "workload.steps=4000000000"});
  auto s = started();
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_EQ(::kill(s.at("worker_pids")[0].get<pid_t>(), SIGKILL), 0);
  auto line = launcher_.find_stdout("\"rejoined\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stderr_text();
  const pid_t second = json::parse(*line).at("pid").get<pid_t>();
  children_.push_back(second);
  ASSERT_EQ(::kill(second, SIGKILL), 0);
  EXPECT_EQ(exit_code(), 1) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("restarts"), 1);
  EXPECT_EQ(j.at("reason"),
            "worker 0 exited with code 137 before the smoke run ended (restart.limit 1 reached)");
}

TEST_F(LaunchMultiprocTest, CleanupRemovesAStaleSegmentAndNeverALiveOne) {
  const std::string stale = segment_of(instance_ + "-stale");
  const std::string live = segment_of(instance_ + "-live");
  leave_stale_segment(instance_ + "-stale");
  child_process running = start_scheduler(instance_ + "-live");
  children_.push_back(running.pid());
  ASSERT_EQ(leftover_segments().size(), 2u);
  auto c = child_process::start({KVC_BINARY, "cleanup"});
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  auto code = c->wait_exit(patience);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << c->stderr_text();
  EXPECT_THAT(c->stdout_text(), HasSubstr("removed " + stale + " (creator pid "));
  EXPECT_THAT(c->stdout_text(), ::testing::Not(HasSubstr(live)));
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{live});
  // The live run goes on and removes its own segment at its end.
  ASSERT_TRUE(running.signal(SIGTERM).ok());
  auto ended = running.wait_exit(patience);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 0) << running.stderr_text();
}

TEST_F(LaunchMultiprocTest, ARefusedLaunchOfAnInstanceInUseLeavesTheLiveSegmentAlone) {
  // Another run of the same instance holds the segment (its creator lives): this launch's
  // scheduler cannot create it and the launch fails, without removing what is not its own.
  const std::string segment = segment_of(instance_);
  child_process running = start_scheduler(instance_);
  children_.push_back(running.pid());
  launch({"--set", "workload.steps=10"});
  EXPECT_EQ(exit_code(), 1) << launcher_.stderr_text();
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("is in use"));
  EXPECT_THAT(launcher_.stderr_text(), ::testing::Not(HasSubstr("left behind")));
  EXPECT_EQ(summary().at("segment_left"), false);
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{segment});
  // The live run goes on and removes its own segment at its end.
  ASSERT_TRUE(running.signal(SIGTERM).ok());
  auto ended = running.wait_exit(patience);
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ(*ended, 0) << running.stderr_text();
}

TEST_F(LaunchMultiprocTest, ALaunchRemovesAStaleSegmentAtItsStart) {
  const std::string stale = segment_of(instance_ + "-old");
  leave_stale_segment(instance_ + "-old");
  launch({"--set", "workload.steps=10"});
  auto line = launcher_.find_stdout("\"cleanup\"", patience);
  ASSERT_TRUE(line.ok()) << launcher_.stderr_text();
  EXPECT_THAT(json::parse(*line).at("removed").get<std::vector<std::string>>(),
              ::testing::Contains(stale));
  started();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  EXPECT_EQ(summary().at("ok"), true);
}

TEST_F(LaunchMultiprocTest, TwoNodesOnTwoLoopbackAddressesRunTheSimulatedEngineVerified) {
  // The simulated engine over two "nodes" (127.0.0.1, 127.0.0.2): node 1's workers take the model
  // input from node 0's executor channel (runtime.port + 1, PLAIN with the token) and write
  // into node 1's own segment; each node's launch reports its own ranks' load checks.
  token_env token;
  const auto argv = two_nodes_argv({"--set", "topology.restart.policy=never"});
  launch(with_node(argv, 0), "sim");
  const auto s0 = started();
  EXPECT_EQ(s0.at("ranks"), json({0, 1}));
  child_process node1;
  json s1;
  ASSERT_NO_FATAL_FAILURE(start_node1(argv, "sim", node1, s1));
  EXPECT_EQ(s1.at("ranks"), json({2, 3}));
  EXPECT_TRUE(s1.at("scheduler_pid").is_null());
  EXPECT_EQ(s1.at("segment"), "/kvc-" + std::to_string(::getuid()) + "-" + instance_ + "-node1");
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("world_size"), 4);
  EXPECT_EQ(j.at("ranks"), 2);
  EXPECT_EQ(j.at("ranks_reported"), 2);
  EXPECT_GE(j.at("steps").get<uint64_t>(), 200u);  // and the drain
  EXPECT_GT(j.at("requests_finished").get<uint64_t>(), 0u);
  EXPECT_GT(j.at("loads_verified").get<uint64_t>(), 0u) << j.dump();
  EXPECT_EQ(j.at("load_mismatches"), 0);
  EXPECT_EQ(j.at("jobs_failed"), 0);
  // The scheduler stopped node 1's workers: its launch ends on its own, cleanly, with its ranks'
  // checks.
  json j1;
  ASSERT_NO_FATAL_FAILURE(node1_summary(node1, j1));
  EXPECT_EQ(j1.at("ok"), true) << j1.dump();
  EXPECT_EQ(j1.at("reason"), "the scheduler stopped the node's workers");
  EXPECT_EQ(j1.at("ranks"), 2);
  EXPECT_EQ(j1.at("ranks_reported"), 2);
  EXPECT_EQ(j1.at("steps"), j.at("steps"));  // every step reached node 1 too
  EXPECT_GT(j1.at("loads_verified").get<uint64_t>(), 0u) << j1.dump();
  EXPECT_EQ(j1.at("load_mismatches"), 0);
  EXPECT_EQ(j1.at("segment_left"), false);
  // Both stages check a load's blocks: TP=2 ranks per node, the same blocks on each node.
  EXPECT_EQ(j1.at("loads_verified"), j.at("loads_verified"));
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, TwoNodesWithoutOffloadingRunTheSimulatedEngineWithNoSegment) {
  // offload.enabled false over two "nodes": no node creates a segment or a connector; node 1's
  // workers run the forward passes of node 0's executor channel and end with it.
  token_env token;
  const auto argv =
      two_nodes_argv({"--set", "topology.restart.policy=never", "--set", "offload.enabled=false"});
  launch(with_node(argv, 0), "sim");
  const auto s0 = started();
  EXPECT_TRUE(s0.at("segment").is_null()) << s0.dump();
  child_process node1;
  json s1;
  ASSERT_NO_FATAL_FAILURE(start_node1(argv, "sim", node1, s1));
  EXPECT_EQ(s1.at("ranks"), json({2, 3}));
  EXPECT_TRUE(s1.at("segment").is_null()) << s1.dump();
  EXPECT_EQ(exit_code(), 0) << launcher_.stderr_text();
  const auto j = summary();
  EXPECT_EQ(j.at("ok"), true) << j.dump();
  EXPECT_EQ(j.at("offload"), false);
  EXPECT_EQ(j.at("world_size"), 4);
  EXPECT_GE(j.at("steps").get<uint64_t>(), 200u);  // and the drain
  EXPECT_GT(j.at("requests_finished").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("bytes_stored"), 0);
  EXPECT_EQ(j.at("jobs_failed"), 0);
  json j1;
  ASSERT_NO_FATAL_FAILURE(node1_summary(node1, j1));
  EXPECT_EQ(j1.at("ok"), true) << j1.dump();
  EXPECT_EQ(j1.at("ranks_reported"), 2);
  EXPECT_EQ(j1.at("step_errors"), 0);
  EXPECT_EQ(j1.at("steps"), j.at("steps"));  // every step's forward reached node 1 too
  EXPECT_TRUE(j1.at("segment").is_null());
  EXPECT_EQ(j1.at("segment_left"), false);
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(LaunchMultiprocTest, SigtermToTheFirstNodeEndsBothNodesLeavingNothing) {
  token_env token;
  const auto argv = two_nodes_argv({"--set", "workload.steps=4000000000"});
  launch(with_node(argv, 0));
  started();
  child_process node1;
  json node1_started;
  ASSERT_NO_FATAL_FAILURE(start_node1(argv, "smoke", node1, node1_started));
  ASSERT_TRUE(launcher_.find_stdout("\"ready\"", patience).ok()) << launcher_.stderr_text();
  ASSERT_EQ(leftover_segments().size(), 2u);
  ASSERT_TRUE(launcher_.signal(SIGTERM).ok());
  EXPECT_EQ(exit_code(), 128 + SIGTERM) << launcher_.stderr_text();
  auto code = node1.wait_exit(patience);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0) << node1.stderr_text();  // its workers were stopped by the scheduler
  // TearDown: no child of either launch, no segment of either node.
}

TEST_F(LaunchMultiprocTest, AMultiNodeLaunchWithoutTokenPortOrReachableHostIsAConfigError) {
  ::unsetenv("KVCONNECT_TOKEN");
  launch(with_node(two_nodes_argv({}), 1));
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("needs the shared token"));
  token_env token;
  launch(with_node(two_nodes_argv({"--set", "runtime.port=0"}), 0));
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("needs a fixed runtime.port"));
  launch(with_node(two_nodes_argv({"--set", "topology.nodes[0].host=0.0.0.0"}), 1));
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("\"0.0.0.0\" is no address the other nodes"));
  EXPECT_EQ(launcher_.stdout_text(), "");  // nothing started
  EXPECT_TRUE(leftover_segments().empty());
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

// The engine of a launch waits for each step's output; only a deadline by time, shorter than
// that wait, releases a step whose report was lost. Timeouts that contradict this are refused
// before anything starts, naming both keys.
TEST_F(LaunchMultiprocTest, ALaunchRefusesAJobDeadlineThatCannotReleaseALostStep) {
  launch({"--set", "runtime.job_timeout_ms=0"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_EQ(launcher_.stdout_text(), "");
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("runtime.job_timeout_ms is 0 (no deadline by time), but the engine waits "
                        "for each step's output for runtime.step_timeout_ms (60000)"));
  launch({"--set", "runtime.step_timeout_ms=10000"});  // the job deadline's default is 30000
  EXPECT_EQ(exit_code(), 2);
  EXPECT_EQ(launcher_.stdout_text(), "");
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("runtime.step_timeout_ms (10000) must exceed runtime.job_timeout_ms "
                        "(30000)"));
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

}  // namespace
TEST_F(LaunchMultiprocTest, AFileTierRootThatCannotBeUsedExitsTwoAndStartsNothing) {
  const std::string absent = "/tmp/kvc-launch-test-absent-" + std::to_string(::getpid());
  launch({"--set", "offload.secondary_tiers=[{root_dir: " + absent + ", capacity_bytes: 1MiB}]"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_EQ(launcher_.stdout_text(), "");
  EXPECT_THAT(launcher_.stderr_text(),
              HasSubstr("offload.secondary_tiers[0].root_dir: " + absent +
                        " does not exist; nothing started"));
  launch({"--set", "offload.secondary_tiers=[{root_dir: /proc/self/status, capacity_bytes: 1}]"});
  EXPECT_EQ(exit_code(), 2);
  EXPECT_THAT(launcher_.stderr_text(), HasSubstr("/proc/self/status is not a directory"));
  EXPECT_TRUE(leftover_segments().empty());
}

}  // namespace kvc::launch
