// Real `kvconnect scheduler` and `kvconnect worker` processes on loopback: the registration
// handshake's refusals (wrong token, wrong layout, duplicate live rank) seen on both sides, a
// worker's death noticed by the scheduler and the coordinator, a scheduler's death noticed by its
// worker, and a happy path where the scheduler drives store/load steps through two workers that
// share one shm segment and checks the bytes. Synchronisation reads the processes' output lines
// and waits for their exits (no sleeps); every test ends with no child and no segment left.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using testing::child_process;
using ::testing::HasSubstr;

/// Safety net for a single wait: only a broken run ever reaches it.
constexpr auto patience = 20s;

class RolesMultiprocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    instance_ = "mp" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    ASSERT_TRUE(leftover_segments().empty());
  }

  void TearDown() override {
    for (auto& c : children_) {
      if (c->running()) ADD_FAILURE() << "child " << c->pid() << " still running: killed";
    }
    children_.clear();  // SIGKILLs and reaps whatever is still running
    const auto left = leftover_segments();
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind: " << ::testing::PrintToString(left);
  }

  /// /dev/shm entries of this test's instance.
  std::vector<std::string> leftover_segments() const {
    return shm::testing::shm_entries(instance_ + "-");
  }

  /// Flags both roles share (each flag once: CLI11 refuses repeated options).
  std::vector<std::string> common(const std::string& role, uint32_t tp, int slots = 8) const {
    return {KVC_BINARY,        role,
            "--instance",      instance_,
            "--tp-size",       std::to_string(tp),
            "--slots",         std::to_string(slots),
            "--kv-page-bytes", "256",
            "--gpu-blocks",    "16",
            "--block-factor",  "2",
            "--kv-layers",     "2"};
  }

  child_process& start(std::vector<std::string> argv) {
    auto c = child_process::start(argv);
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    children_.push_back(
        std::make_unique<child_process>(c.ok() ? std::move(c).value() : child_process{}));
    return *children_.back();
  }

  /// The child's exit code (128 + signal when killed), waiting up to `patience`; -1 when it
  /// did not end in time.
  static int exit_code(child_process& c) {
    auto code = c.wait_exit(patience);
    return code.ok() ? *code : -1;
  }

  /// Starts a scheduler, waits for its "listening" line and remembers the port.
  child_process& start_scheduler(uint32_t tp, std::vector<std::string> extra = {}) {
    auto argv = common("scheduler", tp);
    argv.insert(argv.end(), {"--token", token_});
    argv.insert(argv.end(), extra.begin(), extra.end());
    child_process& s = start(argv);
    auto line = s.find_stdout("\"listening\"", patience);
    EXPECT_TRUE(line.ok()) << s.stderr_text();
    if (line) {
      auto j = nlohmann::json::parse(*line);
      port_ = j.at("port").get<int>();
      EXPECT_GT(port_, 0);
      EXPECT_EQ(j.at("segment").get<std::string>(),
                "/kvc-" + std::to_string(::getuid()) + "-" + instance_ + "-node0");
      EXPECT_EQ(leftover_segments().size(), 1u);  // created, under the expected name
    }
    return s;
  }

  child_process& start_worker(uint32_t tp, uint32_t rank, std::vector<std::string> extra = {},
                              std::string token = "", int slots = 8) {
    auto argv = common("worker", tp, slots);
    argv.insert(argv.end(), {"--port", std::to_string(port_), "--rank", std::to_string(rank),
                             "--token", token.empty() ? token_ : token});
    argv.insert(argv.end(), extra.begin(), extra.end());
    return start(argv);
  }

  /// A worker that must be refused: exits 2 naming `why`, and the scheduler logs it.
  void expect_refused(child_process& scheduler, child_process& worker, const std::string& why) {
    EXPECT_EQ(exit_code(worker), 2) << worker.stderr_text();
    EXPECT_THAT(worker.stderr_text(), HasSubstr("registration failed"));
    EXPECT_THAT(worker.stderr_text(), HasSubstr(why));
    EXPECT_THAT(worker.stdout_text(), ::testing::Not(HasSubstr("\"registered\"")));
    auto logged = scheduler.find_stderr(why, patience);
    ASSERT_TRUE(logged.ok()) << scheduler.stderr_text();
    EXPECT_THAT(*logged, HasSubstr("refused"));
  }

  /// SIGTERM: the scheduler stops its workers, exits 0 and removes its segment.
  void stop_scheduler(child_process& scheduler, uint32_t workers) {
    EXPECT_TRUE(scheduler.signal(SIGTERM).ok());
    EXPECT_EQ(exit_code(scheduler), 0) << scheduler.stderr_text();
    EXPECT_THAT(scheduler.stdout_text(),
                HasSubstr("{\"event\":\"stopped\",\"workers\":" + std::to_string(workers) + "}"));
    EXPECT_TRUE(leftover_segments().empty());
  }

  std::string instance_;
  std::string token_ = "multiproc-secret";
  int port_ = 0;
  std::vector<std::unique_ptr<child_process>> children_;
};

TEST_F(RolesMultiprocTest, SchedulerDrivesStepsThroughTwoWorkersSharingOneSegment) {
  child_process& sched = start_scheduler(2, {"--smoke-steps", "30"});
  child_process& w0 = start_worker(2, 0);
  child_process& w1 = start_worker(2, 1);
  ASSERT_TRUE(w0.find_stdout("\"registered\"", patience)) << w0.stderr_text();
  ASSERT_TRUE(w1.find_stdout("\"registered\"", patience)) << w1.stderr_text();
  auto smoke = sched.find_stdout("\"smoke\"", patience);
  ASSERT_TRUE(smoke.ok()) << sched.stderr_text();
  auto j = nlohmann::json::parse(*smoke);
  EXPECT_EQ(j.at("steps").get<int>(), 30);
  EXPECT_EQ(j.at("jobs_ok").get<int>(), 30);
  EXPECT_EQ(j.at("slots_checked").get<int>(), 20);  // two checked stores per round of three
  EXPECT_EQ(j.at("bytes").get<uint64_t>(), 30ull * 2 * (2 * 2 * 256));  // jobs * ranks * slot

  EXPECT_EQ(exit_code(sched), 0) << sched.stderr_text();
  EXPECT_EQ(exit_code(w0), 0) << w0.stderr_text();
  EXPECT_EQ(exit_code(w1), 0) << w1.stderr_text();
  EXPECT_THAT(sched.stdout_text(), HasSubstr("{\"event\":\"stopped\",\"workers\":2}"));
  EXPECT_THAT(w0.stdout_text(), HasSubstr("{\"event\":\"stopped\",\"rank\":0}"));
  EXPECT_THAT(w1.stdout_text(), HasSubstr("{\"event\":\"stopped\",\"rank\":1}"));
  EXPECT_THAT(sched.stderr_text(), ::testing::Not(HasSubstr("[error]")));
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(RolesMultiprocTest, AWrongTokenIsRefusedOnBothSides) {
  child_process& sched = start_scheduler(1);
  child_process& w = start_worker(1, 0, {}, "not-the-secret");
  expect_refused(sched, w, "wrong token");
  EXPECT_THAT(w.stderr_text(), ::testing::Not(HasSubstr(token_)));
  EXPECT_THAT(sched.stderr_text(), ::testing::Not(HasSubstr(token_)));
  stop_scheduler(sched, 0);
}

TEST_F(RolesMultiprocTest, AnotherPoolLayoutIsRefusedBeforeTheWorkerRegisters) {
  child_process& sched = start_scheduler(1);
  // Twice the slots: another geometry for the same segment name. The worker attaches the pool
  // before it registers, so it refuses the segment itself and never uses up its incarnation.
  child_process& w = start_worker(1, 0, {}, "", /*slots=*/16);
  EXPECT_EQ(exit_code(w), 2) << w.stderr_text();
  EXPECT_THAT(w.stderr_text(), HasSubstr("layout_mismatch"));
  EXPECT_THAT(w.stderr_text(), HasSubstr("num_slots 8"));
  child_process& ok = start_worker(1, 0);  // the same incarnation, configured right
  ASSERT_TRUE(ok.find_stdout("\"registered\"", patience)) << ok.stderr_text();
  stop_scheduler(sched, 1);
  EXPECT_EQ(exit_code(ok), 0) << ok.stderr_text();
}

TEST_F(RolesMultiprocTest, AWorkerWhoseSetUpFailsHasNotUsedUpItsIncarnation) {
  child_process& sched = start_scheduler(1);
  // A backend that does not exist, a device that is not there (the cuda backend without a
  // device or not built), a KV cache that cannot be allocated: each fails before the worker
  // registers, so the corrected worker with the same incarnation is admitted.
  child_process& backend = start_worker(1, 0, {"--backend", "warp-drive"});
  EXPECT_EQ(exit_code(backend), 2) << backend.stderr_text();
  EXPECT_THAT(backend.stderr_text(), HasSubstr("set-up failed"));
  child_process& device = start_worker(1, 0, {"--backend", "cuda", "--device", "99"});
  EXPECT_EQ(exit_code(device), 2) << device.stderr_text();
  EXPECT_THAT(device.stderr_text(), HasSubstr("set-up failed"));
  auto argv = common("worker", 1);
  const auto blocks = std::find(argv.begin(), argv.end(), "--gpu-blocks");
  ASSERT_NE(blocks, argv.end());
  *(blocks + 1) = "4000000000";  // 2 layers of 4e9 pages of 256 bytes: about 2 TB
  argv.insert(argv.end(), {"--port", std::to_string(port_), "--rank", "0", "--token", token_});
  child_process& huge = start(argv);
  EXPECT_EQ(exit_code(huge), 2) << huge.stderr_text();
  EXPECT_THAT(huge.stderr_text(), HasSubstr("set-up failed"));
  EXPECT_THAT(huge.stderr_text(), HasSubstr("cannot allocate"));
  for (child_process* w : {&backend, &device, &huge}) {
    EXPECT_THAT(w->stdout_text(), ::testing::Not(HasSubstr("registered")));
    EXPECT_THAT(w->stdout_text() + w->stderr_text(), ::testing::Not(HasSubstr("bad_alloc")));
  }
  child_process& ok = start_worker(1, 0);  // incarnation 0, configured right
  ASSERT_TRUE(ok.find_stdout("\"registered\"", patience)) << ok.stderr_text();
  EXPECT_THAT(sched.stderr_text(), ::testing::Not(HasSubstr("refused")));
  stop_scheduler(sched, 1);
  EXPECT_EQ(exit_code(ok), 0) << ok.stderr_text();
}

TEST_F(RolesMultiprocTest, ADuplicateRankIsRefusedAndALostRankReturnsWithAHigherIncarnation) {
  child_process& sched = start_scheduler(1);
  child_process& first = start_worker(1, 0);
  ASSERT_TRUE(first.find_stdout("\"registered\"", patience)) << first.stderr_text();
  child_process& dup = start_worker(1, 0, {"--incarnation", "1"});
  expect_refused(sched, dup, "already registered and alive");

  // The live worker dies: the scheduler notices and tells the coordinator.
  EXPECT_TRUE(first.signal(SIGKILL).ok());
  EXPECT_EQ(exit_code(first), 128 + SIGKILL);
  ASSERT_TRUE(sched.find_stderr("scheduler: rank 0 lost", patience)) << sched.stderr_text();
  ASSERT_TRUE(sched.find_stderr("coordinator: rank 0 lost", patience)) << sched.stderr_text();

  child_process& stale = start_worker(1, 0);  // incarnation 0 again
  expect_refused(sched, stale, "incarnation above its last one");
  child_process& next = start_worker(1, 0, {"--incarnation", "1"});
  ASSERT_TRUE(next.find_stdout("\"registered\"", patience)) << next.stderr_text();
  stop_scheduler(sched, 1);
  EXPECT_EQ(exit_code(next), 0) << next.stderr_text();
}

TEST_F(RolesMultiprocTest, AWorkerEndsWhenItsSchedulerDies) {
  child_process& sched = start_scheduler(1);
  child_process& w = start_worker(1, 0);
  ASSERT_TRUE(w.find_stdout("\"registered\"", patience)) << w.stderr_text();
  EXPECT_TRUE(sched.signal(SIGKILL).ok());
  EXPECT_EQ(exit_code(sched), 128 + SIGKILL);
  EXPECT_EQ(exit_code(w), 1) << w.stderr_text();
  EXPECT_THAT(w.stderr_text(), HasSubstr("the scheduler is gone"));
  // A SIGKILLed creator cannot remove its segment: the next create() of the name would replace
  // it as stale. Remove it here, as a launcher's cleanup would.
  const auto left = leftover_segments();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(::shm_unlink(left[0].c_str()), 0);
}

TEST_F(RolesMultiprocTest, AWorkerStopsCleanlyOnSigtermAndTheSchedulerSeesItLeave) {
  child_process& sched = start_scheduler(1);
  child_process& w = start_worker(1, 0);
  ASSERT_TRUE(w.find_stdout("\"registered\"", patience)) << w.stderr_text();
  EXPECT_TRUE(w.signal(SIGTERM).ok());
  EXPECT_EQ(exit_code(w), 0) << w.stderr_text();
  EXPECT_THAT(w.stdout_text(), HasSubstr("{\"event\":\"stopped\",\"rank\":0}"));
  ASSERT_TRUE(sched.find_stderr("scheduler: rank 0 lost", patience)) << sched.stderr_text();
  stop_scheduler(sched, 0);
}

TEST_F(RolesMultiprocTest, AWorkerWithoutASchedulerExitsWithAClearError) {
  child_process& sched = start_scheduler(1);
  stop_scheduler(sched, 0);  // its port is closed now
  child_process& w = start_worker(1, 0);
  EXPECT_EQ(exit_code(w), 1) << w.stderr_text();
  EXPECT_THAT(w.stderr_text(),
              HasSubstr("cannot reach the scheduler at 127.0.0.1:" + std::to_string(port_)));
}

TEST_F(RolesMultiprocTest, AFlagThatDoesNotParseIsAUsageErrorWithExitCode2) {
  child_process& bad_number = start({KVC_BINARY, "worker", "--port", "many", "--rank", "0",
                                     "--token", token_});
  EXPECT_EQ(exit_code(bad_number), 2);
  EXPECT_THAT(bad_number.stderr_text(), HasSubstr("--port"));
  child_process& unknown = start({KVC_BINARY, "scheduler", "--token", token_, "--tp", "2"});
  EXPECT_EQ(exit_code(unknown), 2);
  EXPECT_THAT(unknown.stderr_text(), HasSubstr("--tp"));
  child_process& dir = start({KVC_BINARY, "bench", "manager", "--trace", "/tmp"});
  EXPECT_EQ(exit_code(dir), 2);
  EXPECT_THAT(dir.stderr_text(), HasSubstr("directory"));
  child_process& help = start({KVC_BINARY, "scheduler", "--help"});
  EXPECT_EQ(exit_code(help), 0);
  EXPECT_TRUE(leftover_segments().empty());
}

TEST_F(RolesMultiprocTest, ASchedulerWhoseStdoutReaderIsGoneStopsCleanlyOnSigterm) {
  // `kvconnect scheduler | <read one line>`: the reader closes the pipe before it passes the
  // line on, so once the test has the line nobody reads the scheduler's stdout any more.
  auto argv = common("scheduler", 1);
  argv.insert(argv.end(), {"--token", token_});
  argv.insert(argv.begin(),
              {"/bin/bash", "-c",
               "set -o pipefail; \"$0\" \"$@\" | { read -r line; exec 0<&-; echo \"$line\"; }"});
  child_process& pipeline = start(argv);
  auto line = pipeline.find_stdout("\"listening\"", patience);
  ASSERT_TRUE(line.ok()) << pipeline.stderr_text();
  const auto pid = nlohmann::json::parse(*line).at("pid").get<pid_t>();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  // pipefail: the pipeline's status is the scheduler's, which wrote "stopped" into a closed pipe.
  EXPECT_EQ(exit_code(pipeline), 0) << pipeline.stderr_text();
  EXPECT_THAT(pipeline.stderr_text(), HasSubstr("stdout is gone"));
  EXPECT_TRUE(leftover_segments().empty());
}

// In the next two tests the scheduler's one worker is frozen (SIGSTOP), so stopping it takes
// until the stop timeout: nothing else tells the scheduler the worker is gone (its connection
// timeout is 60 s).

/// Sends SIGSTOP and returns once the kernel has stopped the child (waitid, not reaping it).
::testing::AssertionResult freeze(child_process& c) {
  if (!c.signal(SIGSTOP).ok()) return ::testing::AssertionFailure() << "kill(SIGSTOP) failed";
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(c.pid()), &info, WSTOPPED | WNOWAIT) != 0) {
    return ::testing::AssertionFailure() << "waitid: " << std::strerror(errno);
  }
  return ::testing::AssertionSuccess();
}
TEST_F(RolesMultiprocTest, ASecondSignalEndsTheSchedulerAtOnceAndRemovesItsPool) {
  child_process& sched =
      start_scheduler(1, {"--connection-timeout-ms", "60000", "--stop-timeout-ms", "60000"});
  child_process& w = start_worker(1, 0);
  ASSERT_TRUE(w.find_stdout("\"registered\"", patience).ok()) << w.stderr_text();
  ASSERT_TRUE(freeze(w));
  ASSERT_TRUE(sched.signal(SIGTERM).ok());
  ASSERT_TRUE(sched.find_stderr("shutting down", patience).ok()) << sched.stderr_text();
  ASSERT_TRUE(sched.signal(SIGTERM).ok());  // it is waiting for the frozen worker
  EXPECT_EQ(exit_code(sched), 128 + SIGTERM) << sched.stderr_text();
  EXPECT_TRUE(leftover_segments().empty());
  ASSERT_TRUE(w.signal(SIGKILL).ok());
  EXPECT_EQ(exit_code(w), 128 + SIGKILL);
}

TEST_F(RolesMultiprocTest, AStopThatTimesOutExitsWithFailureAndStillRemovesThePool) {
  child_process& sched =
      start_scheduler(1, {"--connection-timeout-ms", "60000", "--stop-timeout-ms", "300"});
  child_process& w = start_worker(1, 0);
  ASSERT_TRUE(w.find_stdout("\"registered\"", patience).ok()) << w.stderr_text();
  ASSERT_TRUE(freeze(w));
  ASSERT_TRUE(sched.signal(SIGTERM).ok());
  EXPECT_EQ(exit_code(sched), 1) << sched.stderr_text();
  EXPECT_THAT(sched.stderr_text(), HasSubstr("stopping the workers"));
  EXPECT_THAT(sched.stdout_text(), ::testing::Not(HasSubstr("\"stopped\"")));
  EXPECT_TRUE(leftover_segments().empty());
  ASSERT_TRUE(w.signal(SIGKILL).ok());
  EXPECT_EQ(exit_code(w), 128 + SIGKILL);
}

/// A TCP connection to 127.0.0.1:port, closed with the object.
struct tcp_client {
  int fd = -1;
  explicit tcp_client(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~tcp_client() {
    if (fd >= 0) ::close(fd);
  }
  tcp_client(const tcp_client&) = delete;
  tcp_client& operator=(const tcp_client&) = delete;
};

TEST_F(RolesMultiprocTest, HostilePeersReachNothingAndALegitimateRunCompletes) {
  child_process& sched = start_scheduler(1, {"--smoke-steps", "30"});
  // A forged CAF BASP header claiming a 4 GiB payload (made the scheduler allocate ~4 GB and
  // spin before the gate), then silence; and 200 idle connections, more than the gate lets wait.
  tcp_client forged{port_};
  ASSERT_GE(forged.fd, 0);
  const unsigned char header[] = {1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 3,
                                  0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(::send(forged.fd, header, sizeof header, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof header));
  std::vector<std::unique_ptr<tcp_client>> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(std::make_unique<tcp_client>(port_));
  child_process& w = start_worker(1, 0);
  ASSERT_TRUE(w.find_stdout("\"registered\"", patience).ok()) << w.stderr_text();
  auto smoke = sched.find_stdout("\"smoke\"", patience);
  ASSERT_TRUE(smoke.ok()) << sched.stderr_text();
  EXPECT_EQ(nlohmann::json::parse(*smoke).at("jobs_ok").get<int>(), 30);
  EXPECT_EQ(exit_code(sched), 0) << sched.stderr_text();
  EXPECT_EQ(exit_code(w), 0) << w.stderr_text();
  EXPECT_TRUE(leftover_segments().empty());
}

/// Processes whose command line mentions `needle` (reads /proc; only our own user's matter).
std::vector<pid_t> processes_mentioning(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    const std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (cmd.find(needle) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

TEST_F(RolesMultiprocTest, AnInterruptedStepBenchmarkStopsItsWorkersAndRemovesItsPool) {
  child_process& bench =
      start({KVC_BINARY, "bench", "step", "--tp", "2", "--steps", "10000000", "--warmup", "1"});
  ASSERT_TRUE(bench.find_stderr("running", patience).ok()) << bench.stderr_text();
  const std::string instance = "bench-step" + std::to_string(bench.pid());
  EXPECT_EQ(processes_mentioning(instance).size(), 4u);  // 2 kvconnect + 2 ZeroMQ workers
  EXPECT_EQ(shm::testing::shm_entries(instance + "-").size(), 1u);
  ASSERT_TRUE(bench.signal(SIGINT).ok());
  EXPECT_EQ(exit_code(bench), 128 + SIGINT) << bench.stderr_text();
  EXPECT_THAT(bench.stderr_text(), HasSubstr("interrupted by signal 2"));
  EXPECT_TRUE(processes_mentioning(instance).empty());
  EXPECT_TRUE(shm::testing::shm_entries(instance + "-").empty());
}

// The role processes started from one launch config, as `kvconnect launch` starts them
// (--config): both sides map it to the same pool, and every flag given overrides it: a worker
// given other slots is refused as another layout, the smoke run takes --smoke-steps over
// workload.steps. A config that does not load is one error, exit 2, before anything starts.
TEST_F(RolesMultiprocTest, RolesStartedFromOneConfigMeetAndTheirFlagsOverrideIt) {
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / (instance_ + ".yaml");
  {
    std::ofstream out(file);
    out << "topology: {tensor_parallel: 2}\n"
        << "offload: {cpu_bytes_to_use: 32MiB}\n"
        << "runtime: {instance: " << instance_ << "}\n"
        << "workload: {steps: 50}\n";
  }
  const std::string config = file.string();
  auto role = [&](const std::string& name, std::vector<std::string> more) {
    std::vector<std::string> argv{KVC_BINARY, name, "--config", config, "--token", token_};
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  };
  child_process& sched = start(role("scheduler", {"--engine", "smoke", "--smoke-steps", "4"}));
  auto line = sched.find_stdout("\"listening\"", patience);
  ASSERT_TRUE(line.ok()) << sched.stderr_text();
  const auto listening = nlohmann::json::parse(*line);
  EXPECT_EQ(listening.at("segment").get<std::string>(),
            "/kvc-" + std::to_string(::getuid()) + "-" + instance_ + "-node0");
  EXPECT_EQ(listening.at("world_size").get<int>(), 2);
  const std::string port = std::to_string(listening.at("port").get<int>());

  child_process& other = start(role("worker", {"--rank", "0", "--port", port, "--slots", "16"}));
  EXPECT_EQ(exit_code(other), 2) << other.stderr_text();
  EXPECT_THAT(other.stderr_text(), HasSubstr("layout_mismatch"));

  child_process& w0 = start(role("worker", {"--rank", "0", "--port", port}));
  child_process& w1 = start(role("worker", {"--rank", "1", "--port", port}));
  auto smoke = sched.find_stdout("\"smoke\"", patience);
  ASSERT_TRUE(smoke.ok()) << sched.stderr_text();
  EXPECT_EQ(nlohmann::json::parse(*smoke).at("steps").get<int>(), 4);
  EXPECT_EQ(exit_code(sched), 0) << sched.stderr_text();
  EXPECT_EQ(exit_code(w0), 0) << w0.stderr_text();
  EXPECT_EQ(exit_code(w1), 0) << w1.stderr_text();

  child_process& outside = start(role("worker", {"--rank", "9", "--port", port}));
  EXPECT_EQ(exit_code(outside), 2) << outside.stderr_text();
  EXPECT_THAT(outside.stderr_text(), HasSubstr("--rank 9 is outside the world of 2 ranks"));

  {
    std::ofstream out(file);
    out << "topology: {tensor_paralel: 2}\n";
  }
  child_process& bad = start(role("scheduler", {}));
  EXPECT_EQ(exit_code(bad), 2) << bad.stderr_text();
  EXPECT_THAT(bad.stderr_text(), HasSubstr(config + ":1: topology.tensor_paralel"));
  std::filesystem::remove(file);
  EXPECT_TRUE(leftover_segments().empty());
}

}  // namespace
}  // namespace kvc::launch
