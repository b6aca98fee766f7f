// A recorded run: a real `kvconnect scheduler --smoke-steps` and two `kvconnect worker`
// processes with --trace at level jobs, then `kvconnect trace export` and `trace summary` on
// what they wrote. The export's structure is checked (flows paired and causal, slices nested,
// tracks going forward), the summary covers every step and a request's path crosses all three
// processes. Synchronisation reads the processes' output and waits for their exits; the test
// leaves no child, no segment and no trace directory behind.
#include <sys/mman.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/launch/chrome_trace_checks.hpp"
#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::launch {
namespace {

using namespace std::chrono_literals;
using ::kvc::testing::child_process;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr auto patience = 30s;  // safety net for one wait; only a broken run reaches it
constexpr int steps = 12;

class TraceMultiprocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    instance_ = "trace" + std::to_string(::getpid());
    root_ = std::filesystem::temp_directory_path() / ("kvc-trace-mp-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    dir_ = root_ / "traces";
  }
  void TearDown() override {
    for (auto& c : children_) {
      if (c->running()) ADD_FAILURE() << "child " << c->pid() << " still running: killed";
    }
    children_.clear();
    const auto left = shm::testing::shm_entries(instance_ + "-");
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind";
    std::filesystem::remove_all(root_);
  }

  std::vector<std::string> common(const std::string& role) const {
    return {KVC_BINARY,        role,
            "--instance",      instance_,
            "--tp-size",       "2",
            "--slots",         "8",
            "--kv-page-bytes", "256",
            "--gpu-blocks",    "16",
            "--block-factor",  "2",
            "--kv-layers",     "2",
            "--token",         "trace-secret",
            "--trace",         dir_.string(),
            "--trace-level",   "jobs"};
  }

  child_process& start(const std::vector<std::string>& argv) {
    auto c = child_process::start(argv);
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    children_.push_back(
        std::make_unique<child_process>(c.ok() ? std::move(c).value() : child_process{}));
    return *children_.back();
  }

  static int exit_code(child_process& c) {
    auto code = c.wait_exit(patience);
    return code.ok() ? *code : -1;
  }

  /// Runs `kvconnect args...` to its end; its exit code, stdout in `out`.
  int run(std::vector<std::string> args, std::string& out) {
    args.insert(args.begin(), KVC_BINARY);
    child_process& c = start(args);
    const int code = exit_code(c);
    out = c.stdout_text() + c.stderr_text();
    return code;
  }

  /// The recorded run: scheduler (with `scheduler_extra`) + 2 workers, `steps` smoke steps, all
  /// exit 0.
  void record(const std::vector<std::string>& scheduler_extra = {}) {
    auto sargv = common("scheduler");
    sargv.insert(sargv.end(), {"--smoke-steps", std::to_string(steps)});
    sargv.insert(sargv.end(), scheduler_extra.begin(), scheduler_extra.end());
    child_process& sched = start(sargv);
    auto line = sched.find_stdout("\"listening\"", patience);
    ASSERT_TRUE(line.ok()) << sched.stderr_text();
    const int port = nlohmann::json::parse(*line).at("port").get<int>();
    std::vector<child_process*> workers;
    for (int rank = 0; rank < 2; ++rank) {
      auto w = common("worker");
      w.insert(w.end(), {"--port", std::to_string(port), "--rank", std::to_string(rank)});
      workers.push_back(&start(w));
    }
    ASSERT_TRUE(sched.find_stdout("\"smoke\"", patience).ok()) << sched.stderr_text();
    EXPECT_EQ(exit_code(sched), 0) << sched.stderr_text();
    for (auto* w : workers) EXPECT_EQ(exit_code(*w), 0) << w->stderr_text();
  }

  std::string instance_;
  std::filesystem::path root_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<child_process>> children_;
};

TEST_F(TraceMultiprocTest, ARecordedRunExportsToAWellFormedTraceAndSummarizesEveryStep) {
  ASSERT_NO_FATAL_FAILURE(record());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator{dir_}) {
    files += e.path().extension() == ".jsonl";
  }
  EXPECT_EQ(files, 3u);  // one per process

  std::string out;
  const auto json_path = (root_ / "trace.json").string();
  ASSERT_EQ(run({"trace", "export", dir_.string(), "-o", json_path}, out), 0) << out;
  EXPECT_THAT(out, HasSubstr("of 3 processes"));
  nlohmann::json doc = nlohmann::json::parse(std::ifstream{json_path});
  EXPECT_THAT(testing::check_chrome_trace(doc), ::testing::IsEmpty());

  std::set<std::string> process_names, slice_names;
  size_t flows = 0, job_begins = 0, job_ends = 0, counters = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") process_names.insert(e["args"]["name"]);
    if (ph == "X") slice_names.insert(e["name"].get<std::string>());
    flows += ph == "s";
    job_begins += ph == "b";
    job_ends += ph == "e";
    counters += ph == "C";
  }
  EXPECT_EQ(process_names.size(), 3u);
  // Every step's metadata and report, to and from both ranks, linked; plus hellos and the
  // control plane's registrations and stops.
  EXPECT_GE(flows, static_cast<size_t>(steps) * 2 * 2 + 2 + 2 + 2);
  EXPECT_EQ(job_begins, static_cast<size_t>(steps) * 2);  // one job per step, on each rank
  EXPECT_EQ(job_ends, job_begins);
  EXPECT_GT(counters, 0u);
  // Counters: one series per process and name, in time order; the planner's and each rank's
  // jobs in flight end at 0 (every job came back), the pool's slots used rose above 0.
  struct series {
    std::vector<double> ts;
    std::vector<int64_t> values;
  };
  std::map<std::pair<int64_t, std::string>, series> counter_series;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    auto& c = counter_series[{e["pid"].get<int64_t>(), e["name"].get<std::string>()}];
    c.ts.push_back(e["ts"].get<double>());
    c.values.push_back(e["args"].begin()->get<int64_t>());
  }
  std::set<std::string> counter_names;
  for (const auto& [key, c] : counter_series) {
    counter_names.insert(key.second);
    EXPECT_TRUE(std::is_sorted(c.ts.begin(), c.ts.end())) << key.second;
    if (key.second.starts_with("jobs in flight")) {
      EXPECT_EQ(c.values.back(), 0) << key.second;
    }
    for (const int64_t v : c.values) EXPECT_GE(v, 0) << key.second;
    if (key.second == "pool slots used") {
      EXPECT_GT(*std::max_element(c.values.begin(), c.values.end()), 0);
    }
  }
  EXPECT_TRUE(counter_names.count("pool slots used"));
  EXPECT_TRUE(counter_names.count("jobs in flight"));
  EXPECT_TRUE(counter_names.count("jobs in flight rank 0"));
  EXPECT_TRUE(counter_names.count("jobs in flight rank 1"));
  for (const char* name :
       {"build_connector_meta", "output_applied", "rank_step", "send metadata", "receive report",
        "receive registration", "rank_up", "send stop", "receive stop", "rank_down"}) {
    EXPECT_TRUE(slice_names.count(name)) << name;
  }

  ASSERT_EQ(run({"trace", "summary", dir_.string()}, out), 0) << out;
  EXPECT_THAT(out, HasSubstr(std::to_string(steps) + " steps"));
  EXPECT_THAT(out, HasSubstr("p99"));
  EXPECT_THAT(out, HasSubstr("rank   0"));
  EXPECT_THAT(out, HasSubstr("rank   1"));

  // b0: the first load (step 2), a CPU hit of a0's stored blocks.
  ASSERT_EQ(run({"trace", "summary", dir_.string(), "--request", "b0"}, out), 0) << out;
  for (const char* what : {"job_planned", "job_submit", "job_complete", "job_applied", "rank 0",
                           "rank 1", "metadata", "report"}) {
    EXPECT_THAT(out, HasSubstr(what)) << out;
  }
  EXPECT_NE(run({"trace", "summary", dir_.string(), "--request", "nobody"}, out), 0);
  EXPECT_THAT(out, HasSubstr("no record names request 'nobody'"));
}

TEST_F(TraceMultiprocTest, AnInjectedChannelFaultIsTracedWhereItFired) {
  // The third report frame is duplicated at the scheduler's fault seam: one "fault" record in
  // the scheduler's file (kind, spec, rank, step), one slice of that name in the export.
  ASSERT_NO_FATAL_FAILURE(record({"--fault", "duplicate_report:nth=3"}));
  std::vector<nlohmann::json> faults;
  for (const auto& e : std::filesystem::directory_iterator{dir_}) {
    std::ifstream in{e.path()};
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.value("type", "") == "fault") faults.push_back(j);
    }
  }
  ASSERT_EQ(faults.size(), 1u);
  EXPECT_EQ(faults[0].value("role", ""), "scheduler");
  EXPECT_EQ(faults[0].value("note", ""), "duplicate_report (fault spec 0)");
  EXPECT_GE(faults[0].value("rank", -1), 0);
  EXPECT_GE(faults[0].value("step", -1), 1);
  std::string out;
  const auto json_path = (root_ / "trace.json").string();
  ASSERT_EQ(run({"trace", "export", dir_.string(), "-o", json_path}, out), 0) << out;
  nlohmann::json doc = nlohmann::json::parse(std::ifstream{json_path});
  size_t slices = 0;
  for (const auto& e : doc["traceEvents"]) slices += e["ph"] == "X" && e["name"] == "fault";
  EXPECT_EQ(slices, 1u);
}

TEST_F(TraceMultiprocTest, ExportRefusesADirectoryWithoutTraces) {
  std::filesystem::create_directories(dir_);
  std::string out;
  EXPECT_EQ(run({"trace", "export", dir_.string(), "-o", (root_ / "x.json").string()}, out), 1);
  EXPECT_THAT(out, HasSubstr("no *.jsonl trace files"));
  EXPECT_FALSE(std::filesystem::exists(root_ / "x.json"));
}

// A trace file that is a symlink loop, or a directory that is one: one `trace: cannot read`
// line naming it (not a raw filesystem exception), exit 1.
TEST_F(TraceMultiprocTest, ASymlinkLoopIsOneClearError) {
  std::filesystem::create_directories(dir_);
  std::filesystem::create_symlink(dir_ / "worker-1.jsonl", dir_ / "worker-1.jsonl");
  const auto loop = root_ / "loop";
  std::filesystem::create_directory_symlink(loop, loop);
  const std::pair<std::string, std::string> cases[] = {
      {dir_.string(), (dir_ / "worker-1.jsonl").string()}, {loop.string(), loop.string()}};
  for (const auto& [dir, named] : cases) {
    for (const char* sub : {"export", "summary"}) {
      std::vector<std::string> args{"trace", sub, dir};
      if (std::string{sub} == "export")
        args.insert(args.end(), {"-o", (root_ / "x.json").string()});
      std::string out;
      EXPECT_EQ(run(args, out), 1) << out;
      EXPECT_THAT(out, HasSubstr("trace: cannot read " + named + ": Too many levels of symbolic"));
      EXPECT_THAT(out, Not(HasSubstr("filesystem error")));
    }
  }
}

}  // namespace
}  // namespace kvc::launch
