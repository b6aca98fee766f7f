// `kvconnect replay-run` on real recordings: an in-process `kvconnect soak` with channel and
// copy faults (reports dropped, duplicated, delayed, reordered, corrupted; deadlines firing)
// and a multi-process `kvconnect launch` of the default config, each recorded with
// observe.record, replay with every step identical. A record with one report altered (and
// written back whole, checksums included) is divergent (exit 1, naming the step and the
// field); a corrupted byte, another schema or a changed config is refused (exit 2). Synchronisation
// waits for the processes' exits; the test leaves no child, no segment and no record directory
// behind.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/record/record_codec.hpp"
#include "actors/record/record_reader.hpp"
#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::record {
namespace {

using namespace std::chrono_literals;
using ::kvc::testing::child_process;

constexpr auto patience = 120s;  // safety net for one wait; only a broken run reaches it

class ReplayRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    instance_ = "rec" + std::to_string(::getpid());
    dir_ = std::filesystem::temp_directory_path() / ("kvc-record-" + std::to_string(::getpid()));
    record_dir_ = dir_ / "runs" / "records";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    old_umask_ = ::umask(022);  // the modes asserted are the ones kvconnect asked for
  }
  void TearDown() override {
    const auto left = shm::testing::shm_entries(instance_ + "-");
    for (const auto& n : left) ::shm_unlink(n.c_str());
    EXPECT_TRUE(left.empty()) << "segments left behind";
    std::filesystem::remove_all(dir_);
    ::umask(old_umask_);
  }

  /// Runs the binary with `args` to its end: (exit code, stdout).
  std::pair<int, std::string> run(std::vector<std::string> args) {
    args.insert(args.begin(), KVC_BINARY);
    auto c = child_process::start(args);
    EXPECT_TRUE(c.ok()) << c.error().to_string();
    if (!c.ok()) return {-1, ""};
    auto code = c->wait_exit(patience);
    EXPECT_TRUE(code.ok()) << code.error().to_string();
    last_stderr_ = c->stderr_text();
    return {code.ok() ? *code : -1, c->stdout_text()};
  }

  std::vector<std::string> record_set() const {
    return {"--set", "runtime.instance=" + instance_,
            "--set", "observe.record=true",
            "--set", "observe.record_dir=" + record_dir_.string()};
  }

  std::string the_record() const {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(record_dir_)) {
      files.push_back(e.path().string());
    }
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? std::string{} : files[0];
  }

  static void write(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  /// The replay of the record in record_dir_ is identical, with one line per step.
  void expect_identical() {
    auto [code, out] = run({"replay-run", record_dir_.string()});
    EXPECT_EQ(code, 0) << out;
    auto rec = read_record_file(the_record());
    ASSERT_TRUE(rec.ok()) << rec.error().to_string();
    size_t builds = 0;
    for (const auto& e : rec->events) builds += std::holds_alternative<build_event>(e) ? 1 : 0;
    EXPECT_GT(builds, 0u);
    size_t step_lines = 0;
    for (size_t at = out.find("step "); at != std::string::npos; at = out.find("\nstep ", at + 1)) {
      ++step_lines;
    }
    EXPECT_EQ(step_lines, builds);
    EXPECT_NE(out.find("identical"), std::string::npos) << out;
    auto [qcode, quiet] = run({"replay-run", "--quiet", record_dir_.string()});
    EXPECT_EQ(qcode, 0);
    EXPECT_EQ(quiet.find("step "), std::string::npos) << quiet;
  }

  /// The permission bits of `p`.
  static unsigned mode_of(const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  }

  std::string instance_;
  std::filesystem::path dir_;
  /// Two levels below dir_, missing until the run makes them (0700).
  std::filesystem::path record_dir_;
  std::string last_stderr_;  ///< the last run's
  mode_t old_umask_ = 0;
};

using ReplayRunSoak = ReplayRunTest;
using ReplayRunLaunch = ReplayRunTest;

TEST_F(ReplayRunSoak, SoakWithFaultsReplaysIdenticallyAndTamperingIsCaught) {
  auto [code, out] = run({"soak",
                          "--steps",
                          "150",
                          "--seed",
                          "5",
                          "--fault-seed",
                          "9",
                          "--fault",
                          "drop_report:p=0.03",
                          "--fault",
                          "duplicate_report:p=0.03",
                          "--fault",
                          "delay_report:p=0.03,by=2",
                          "--fault",
                          "reorder_reports:p=0.02",
                          "--fault",
                          "fail_copy:dir=store,p=0.05",
                          "--set",
                          "runtime.job_timeout_steps=20",
                          "--set",
                          "runtime.job_timeout_ms=100",
                          "--set",
                          "observe.record=true",
                          "--set",
                          "observe.record_dir=" + record_dir_.string()});
  // 3: a fault-report invariant failed (a loaded host can time jobs out differently); the
  // replay must be identical either way.
  ASSERT_TRUE(code == 0 || code == 3) << code << out;
  // The faults fired: reports were dropped and duplicated on the way to the coordinator.
  ASSERT_NE(out.find("\"drop_report\":"), std::string::npos) << out;
  EXPECT_EQ(out.find("\"drop_report\":0,"), std::string::npos) << out;
  EXPECT_EQ(out.find("\"duplicate_report\":0,"), std::string::npos) << out;
  expect_identical();
  // The record directory did not exist: the scheduler made it, private, and the record too.
  EXPECT_EQ(mode_of(dir_ / "runs"), 0700u);
  EXPECT_EQ(mode_of(record_dir_), 0700u);
  EXPECT_EQ(mode_of(the_record()), 0600u);

  const std::string path = the_record();
  const std::string original = read(path);
  auto rec = read_record(original);
  ASSERT_TRUE(rec.ok()) << rec.error().to_string();

  // One report altered: the first successful completion reports one byte more.
  bool altered = false;
  for (auto& e : rec->events) {
    auto* r = std::get_if<report_event>(&e);
    if (r == nullptr || r->report.events.empty() || !r->report.events[0].ok) continue;
    r->report.events[0].bytes += 1;
    altered = true;
    break;
  }
  ASSERT_TRUE(altered);
  write(path, encode_record(*rec));
  auto [div_code, div_out] = run({"replay-run", "--quiet", path});
  EXPECT_EQ(div_code, 1) << div_out;
  EXPECT_NE(div_out.find("divergence at step "), std::string::npos) << div_out;
  EXPECT_NE(div_out.find("output.jobs differs"), std::string::npos) << div_out;

  // Single bytes corrupted anywhere after the magic (in events, reports, checksums): each is
  // refused, naming the frame and its offset, never replayed as identical or divergent.
  for (size_t i = 1; i <= 16; ++i) {
    std::string flipped = original;
    const size_t at = 8 + (original.size() - 8) * i / 17;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    write(path, flipped);
    EXPECT_EQ(run({"replay-run", "--quiet", path}).first, 2) << "byte " << at;
    EXPECT_NE(last_stderr_.find("frame "), std::string::npos) << last_stderr_;
    EXPECT_NE(last_stderr_.find("(byte "), std::string::npos) << last_stderr_;
  }

  // Another schema version: refused.
  std::string schema = original;
  schema[8 + 4 + 1] = static_cast<char>(record_schema_version + 1);
  write(path, schema);
  EXPECT_EQ(run({"replay-run", path}).first, 2);

  // The header's config changed (its frame's checksum refuses it): refused.
  std::string config = original;
  config[8 + 4 + 1 + 1 + 9 + 2 + 1] ^= 0x01;
  write(path, config);
  EXPECT_EQ(run({"replay-run", path}).first, 2);

  // Not a record at all.
  write(path, "garbage");
  EXPECT_EQ(run({"replay-run", path}).first, 2);
}

// The record and trace directories do not exist: the launcher makes them (0700) before
// anything starts, and every file the processes write there is 0600.
TEST_F(ReplayRunLaunch, DefaultLaunchReplaysIdenticallyFromPrivateFiles) {
  const auto trace_dir = dir_ / "traces" / "run1";
  auto args = record_set();
  args.insert(args.begin(), "launch");
  args.insert(args.end(), {"--trace", trace_dir.string()});
  auto [code, out] = run(args);
  ASSERT_EQ(code, 0) << out << last_stderr_;
  expect_identical();
  for (const auto& d : {dir_ / "runs", record_dir_, dir_ / "traces", trace_dir}) {
    EXPECT_EQ(mode_of(d), 0700u) << d;
  }
  EXPECT_EQ(mode_of(the_record()), 0600u);
  size_t traces = 0;
  for (const auto& e : std::filesystem::directory_iterator(trace_dir)) {
    EXPECT_EQ(mode_of(e.path()), 0600u) << e.path();
    ++traces;
  }
  EXPECT_GT(traces, 1u);  // the scheduler's and the workers'
}

// A record directory that cannot be made (a file is in the way) is refused before anything
// starts: exit 2 naming the key and the directory, no process, no segment.
TEST_F(ReplayRunLaunch, ARecordDirectoryThatCannotBeMadeIsRefusedBeforeAnythingStarts) {
  std::ofstream{dir_ / "a-file"} << "in the way";
  record_dir_ = dir_ / "a-file" / "records";
  auto args = record_set();
  args.insert(args.begin(), "launch");
  auto [code, out] = run(args);
  EXPECT_EQ(code, 2) << out << last_stderr_;
  EXPECT_NE(
      last_stderr_.find("observe.record_dir: cannot create the directory " + record_dir_.string()),
      std::string::npos)
      << last_stderr_;
  EXPECT_NE(last_stderr_.find("nothing started"), std::string::npos) << last_stderr_;
  EXPECT_EQ(out.find("\"event\""), std::string::npos) << out;  // no process, no summary
}

}  // namespace
}  // namespace kvc::record
