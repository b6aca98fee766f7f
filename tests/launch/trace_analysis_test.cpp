// The trace analysis (launch/clock_offsets, chrome_trace, trace_summary, trace_file) on
// synthetic runs whose clocks are skewed by known amounts: the offsets come back, the export's
// structure holds (flows paired and causal, slices nested, time going forward on every track),
// the summary's phases are the ones built in, and bad files are refused naming file and line
// (values out of their field's range, never wrapped; a wall clock far from the process's
// others; a symlink loop).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/trace/traced_transport.hpp"
#include "launch/trace/chrome_trace.hpp"
#include "launch/trace/clock_offsets.hpp"
#include "launch/trace/trace_file.hpp"
#include "launch/trace/trace_summary.hpp"
#include "tests/launch/chrome_trace_checks.hpp"

namespace kvc::launch {
namespace {

using ::testing::HasSubstr;
using trace::direction;

constexpr int64_t ms = 1'000'000;
constexpr int64_t us = 1'000;

TEST(ClockOffsets, SymmetricDelaysGiveTheSkewsExactly) {
  // clock_p = clock_0 + skew[p]; every message takes 100 µs (the fastest) or more.
  const std::vector<int64_t> skew{0, 5 * ms, -3 * ms};
  std::vector<message_pair> pairs;
  auto msg = [&](uint32_t from, uint32_t to, int64_t t_ref, int64_t delay) {
    pairs.push_back({from, to, t_ref + skew[from], t_ref + delay + skew[to]});
  };
  for (int i = 0; i < 10; ++i) {
    const int64_t t = i * ms;
    msg(0, 1, t, 100 * us + i * 7 * us);
    msg(1, 0, t + 300 * us, 100 * us + i * 3 * us);
    msg(0, 2, t, 100 * us + i * 11 * us);
    msg(2, 0, t + 400 * us, 100 * us);
  }
  const auto off = estimate_offsets(3, pairs, 0);
  ASSERT_EQ(off.size(), 3u);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], -5 * ms);
  EXPECT_EQ(off[2], 3 * ms);
}

TEST(ClockOffsets, LinksThroughAnotherProcessAndKeepsTheInitialGuessOfTheUnlinked) {
  const std::vector<int64_t> skew{0, 2 * ms, 7 * ms, 0};
  std::vector<message_pair> pairs;
  auto msg = [&](uint32_t from, uint32_t to, int64_t t, int64_t delay) {
    pairs.push_back({from, to, t + skew[from], t + delay + skew[to]});
  };
  msg(0, 1, 0, 50 * us);
  msg(1, 0, ms, 50 * us);
  msg(1, 2, 0, 20 * us);  // 2 is linked to 1 only, one way
  const auto off = estimate_offsets(4, pairs, 0, {0, 0, 0, 42});
  EXPECT_EQ(off[1], -2 * ms);
  // One direction: the bound (zero delay), so the receive is not before its send.
  EXPECT_EQ(off[2], -7 * ms - 20 * us);
  EXPECT_EQ(off[3], 42);
}

TEST(ClockOffsets, OneWayMessagesNeverEndBeforeTheyStart) {
  const int64_t skew = -9 * ms;  // the receiver's clock is behind: raw times go backwards
  std::vector<message_pair> pairs;
  for (int i = 0; i < 5; ++i) pairs.push_back({0, 1, i * ms, i * ms + (30 + i) * us + skew});
  const auto off = estimate_offsets(2, pairs, 0);
  for (const auto& p : pairs) EXPECT_GE(p.recv_ns + off[1], p.send_ns + off[0]);
}

/// A synthetic run: the scheduler (process 0) and two worker processes whose monotonic clocks
/// run `skew` ahead, `steps` steps with known phase lengths.
struct synthetic_run {
  trace_set set;
  std::vector<int64_t> skew{0, 4 * ms, -6 * ms};

  void add(uint32_t process, trace::trace_record r, int64_t t_ref) {
    r.mono_ns = t_ref + skew[process];
    r.wall_ns = r.mono_ns + 1'700'000'000'000'000'000;  // wall clocks agree with mono + skew
    r.pid = 100 + process;
    r.role = process == 0 ? "scheduler" : "worker";
    if (r.track.empty())
      r.track = process == 0 ? "scheduler" : "rank " + std::to_string(process - 1);
    set.records.push_back({std::move(r), process});
  }
  trace::trace_record msg(direction d, const char* type, int64_t step, int64_t rank) {
    trace::trace_record r;
    r.dir = d;
    r.type = type;
    r.step = step;
    r.rank = rank;
    r.bytes = 64;
    r.msg = trace::message_id(type, step, "r" + std::to_string(rank) + ".0");
    return r;
  }

  explicit synthetic_run(int steps) {
    set.processes = {{0, 100, "scheduler"}, {0, 101, "worker"}, {0, 102, "worker"}};
    for (int s = 1; s <= steps; ++s) {
      const int64_t t = s * 10 * ms;
      trace::trace_record build;
      build.type = "build_connector_meta";
      build.step = s;
      build.dur_ns = 200 * us;
      build.value = s;
      for (int64_t rank = 0; rank < 2; ++rank) {
        const uint32_t p = static_cast<uint32_t>(rank) + 1;
        add(0, msg(direction::send, "metadata", s, rank), t + 100 * us + rank * us);
        // delivery 150 µs; handling 1 ms (rank 1: 2 ms); return 150 µs
        const int64_t recv = t + 250 * us + rank * us;
        const int64_t handling = (rank == 1 ? 2 : 1) * ms;
        add(p, msg(direction::receive, "metadata", s, rank), recv);
        trace::trace_record step_span;
        step_span.type = "rank_step";
        step_span.step = s;
        step_span.rank = rank;
        step_span.dur_ns = handling - 20 * us;
        add(p, step_span, recv + handling - 10 * us);
        add(p, msg(direction::send, "report", s, rank), recv + handling);
        add(0, msg(direction::receive, "report", s, rank), recv + handling + 150 * us);
      }
      add(0, build, t + 200 * us);
      trace::trace_record applied;
      applied.type = "output_applied";
      applied.step = s;
      applied.dur_ns = 50 * us;
      applied.value = 0;
      // the last report (rank 1) arrives at t + 251 µs + 2 ms + 150 µs
      add(0, applied, t + 2401 * us + 300 * us);
    }
  }
};

TEST(ChromeTrace, PoolSlotRecordsBecomeTheirOwnCounterSeriesInTimeOrder) {
  synthetic_run run{3};
  for (int s = 1; s <= 3; ++s) {
    trace::trace_record pool;
    pool.type = "pool_slots";
    pool.step = s;
    pool.value = 4 * s;
    pool.bytes = 64;
    run.add(0, pool, s * 10 * ms + 200 * us);
  }
  const auto doc = to_chrome_trace(run.set);
  EXPECT_THAT(testing::check_chrome_trace(doc), ::testing::IsEmpty());
  std::vector<std::pair<double, int64_t>> slots;
  size_t jobs_in_flight = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    if (e["name"] == "pool slots used") {
      slots.emplace_back(e["ts"].get<double>(), e["args"]["slots"].get<int64_t>());
    }
    jobs_in_flight += e["name"] == "jobs in flight";
  }
  ASSERT_EQ(slots.size(), 3u);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(slots[i].second, 4 * static_cast<int64_t>(i + 1));
    if (i > 0) {
      EXPECT_GT(slots[i].first, slots[i - 1].first);
    }
  }
  EXPECT_EQ(jobs_in_flight, 3u * 2);  // the spans' counter is not mixed with the pool's
}

TEST(ChromeTrace, TheFileTiersJobsAreAsyncSlicesOnTheirOwnTracks) {
  synthetic_run run{2};
  auto tier_record = [&](const char* type, transfer_kind kind, int64_t job, int64_t t) {
    trace::trace_record r;
    r.type = type;
    r.job = job;
    r.track = trace::tier_track(kind);
    run.add(0, r, t);
  };
  tier_record("job_planned", transfer_kind::cascade, 7, 10 * ms + 200 * us);
  tier_record("job_planned", transfer_kind::promotion, 8, 10 * ms + 200 * us);
  tier_record("job_applied", transfer_kind::cascade, 7, 20 * ms + 2700 * us);
  tier_record("job_applied", transfer_kind::promotion, 8, 20 * ms + 2700 * us);
  trace::trace_record gpu;  // a GPU transfer's planned record stays on the scheduler's track
  gpu.type = "job_planned";
  gpu.job = 9;
  run.add(0, gpu, 10 * ms + 200 * us);
  const auto doc = to_chrome_trace(run.set);
  EXPECT_THAT(testing::check_chrome_trace(doc), ::testing::IsEmpty());
  std::map<int, std::string> thread_names;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == 1) {
      thread_names[e["tid"].get<int>()] = e["args"]["name"];
    }
  }
  std::map<std::string, std::vector<std::string>> tier_slices;  // track -> "b 7", "e 7"
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "b" && e["ph"] != "e") continue;
    EXPECT_EQ(e["cat"], "tier");
    tier_slices[thread_names.at(e["tid"].get<int>())].push_back(e["ph"].get<std::string>() + " " +
                                                                e["name"].get<std::string>());
  }
  EXPECT_EQ(tier_slices["tier cascade"],
            (std::vector<std::string>{"b tier job 7", "e tier job 7"}));
  EXPECT_EQ(tier_slices["tier promotion"],
            (std::vector<std::string>{"b tier job 8", "e tier job 8"}));
  EXPECT_EQ(tier_slices.size(), 2u);  // job 9 (GPU) has no tier slice
}

TEST(ChromeTrace, FlowsArePairedAndCausalSlicesNestAndTracksGoForward) {
  synthetic_run run{5};
  const auto doc = to_chrome_trace(run.set);
  EXPECT_THAT(testing::check_chrome_trace(doc), ::testing::IsEmpty());
  size_t flows = 0, slices = 0, counters = 0, names = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    flows += ph == "s";
    slices += ph == "X";
    counters += ph == "C";
    names += ph == "M";
  }
  EXPECT_EQ(flows, 5u * 2 * 2);  // metadata and report per rank per step
  EXPECT_EQ(slices, run.set.records.size());
  EXPECT_EQ(counters, 5u * 2);  // jobs in flight at build and apply
  EXPECT_EQ(names, 3u + 3u);    // three processes, three tracks
  // The skews were found: rank 0's metadata receive lands 150 µs after its send.
  const auto& offsets = doc["otherData"]["clock_offsets_ns"];
  EXPECT_EQ(offsets["101"].get<int64_t>(), -4 * ms);
  EXPECT_EQ(offsets["102"].get<int64_t>(), 6 * ms);
}

TEST(ChromeTrace, TheCheckerCatchesAnUnpairedFlowAndAnOverlappingSlice) {
  nlohmann::json bad = {
      {"traceEvents",
       {{{"ph", "s"}, {"id", 1}, {"bind_id", 1}, {"pid", 1}, {"tid", 1}, {"ts", 0.0}},
        {{"ph", "X"}, {"name", "a"}, {"pid", 1}, {"tid", 1}, {"ts", 1.0}, {"dur", 5.0}},
        {{"ph", "X"}, {"name", "b"}, {"pid", 1}, {"tid", 1}, {"ts", 2.0}, {"dur", 5.0}},
        {{"ph", "X"}, {"name", "c"}, {"pid", 1}, {"tid", 1}, {"ts", 1.5}, {"dur", 0.0}}}}};
  const auto problems = testing::check_chrome_trace(bad);
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("has no end")));
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("overlaps")));
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("go back")));
}

TEST(TraceSummary, SplitsEachStepIntoItsPhasesAndNamesTheSlowestRank) {
  synthetic_run run{4};
  const auto s = summarize_steps(run.set);
  ASSERT_EQ(s.steps.size(), 4u);
  for (const auto& st : s.steps) {
    ASSERT_EQ(st.ranks.size(), 2u);
    EXPECT_EQ(st.ranks[0].delivery_ns, 150 * us);
    EXPECT_EQ(st.ranks[0].handling_ns, 1 * ms);
    EXPECT_EQ(st.ranks[1].handling_ns, 2 * ms);
    EXPECT_EQ(st.ranks[1].return_ns, 150 * us);
    EXPECT_EQ(st.last_rank, 1);
    EXPECT_EQ(st.total_ns, 2701 * us - 100 * us);
    EXPECT_EQ(st.aggregate_ns, 300 * us);
  }
  EXPECT_EQ(s.total.p50_ns, 2601 * us);
  EXPECT_EQ(s.handling.p99_ns, 2 * ms);
  ASSERT_EQ(s.slowest.size(), 2u);
  EXPECT_EQ(s.slowest[0].rank, 1);
  EXPECT_EQ(s.slowest[0].last_count, 4u);
  const std::string text = format_summary(s);
  EXPECT_THAT(text, HasSubstr("4 steps"));
  EXPECT_THAT(text, HasSubstr("rank   1"));
}

TEST(TraceSummary, ARequestsPathFollowsItsJobsAcrossProcesses) {
  synthetic_run run{2};
  trace::trace_record planned;
  planned.type = "job_planned";
  planned.step = 1;
  planned.job = 7;
  planned.request = "req-7";
  run.add(0, planned, 10 * ms + 50 * us);
  trace::trace_record taken;
  taken.type = "job_submit";
  taken.step = 1;
  taken.rank = 0;
  taken.job = 7;
  taken.request = "req-7";
  run.add(1, taken, 10 * ms + 260 * us);
  auto path = request_path(run.set, "req-7");
  ASSERT_TRUE(path) << path.error().to_string();
  EXPECT_THAT(*path, HasSubstr("job_planned"));
  EXPECT_THAT(*path, HasSubstr("job_submit"));
  EXPECT_THAT(*path, HasSubstr("metadata"));  // the step's messages are on the path
  EXPECT_LT(path->find("job_planned"), path->find("job_submit"));
  auto none = request_path(run.set, "nobody");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code(), errc::not_found);
}

class TraceFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvc-trace-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream{dir_ / name} << text;
  }
  std::filesystem::path dir_;
};

constexpr const char* good_line =
    R"({"wall_ns":5,"mono_ns":6,"node":0,"pid":42,"role":"worker","track":"rank 0",)"
    R"("dir":"send","type":"report","step":3,"rank":0,"bytes":10,"msg":"report/3/r0.0"})";

TEST_F(TraceFileTest, ReadsRecordsAndGroupsFilesByProcess) {
  trace::trace_record r;
  r.wall_ns = 1;
  r.mono_ns = 2;
  r.pid = 7;
  r.role = "scheduler";
  r.track = "scheduler";
  r.type = "metadata";
  r.dir = direction::send;
  r.step = 4;
  r.note = "x\"y";
  write("scheduler-7-node0.jsonl", trace::to_json_line(r) + "\n");
  write("worker-42-r0.0.jsonl", std::string{good_line} + "\n" + good_line + "\n");
  write("worker-42-r1.0.jsonl", std::string{good_line} + "\n");
  auto set = read_trace_dir(dir_.string());
  ASSERT_TRUE(set) << set.error().to_string();
  ASSERT_EQ(set->processes.size(), 2u);  // pid 42's two files are one process
  EXPECT_EQ(set->processes[0].role, "scheduler");
  ASSERT_EQ(set->records.size(), 4u);
  EXPECT_EQ(set->records[0].record.note, "x\"y");
  EXPECT_EQ(set->records[0].record.step, 4);
  EXPECT_EQ(set->records[1].record.msg, "report/3/r0.0");
  EXPECT_EQ(set->records[1].process, 1u);
}

TEST_F(TraceFileTest, ABadLineIsOneErrorNamingFileAndLine) {
  write("worker-1.jsonl", std::string{good_line} + "\n{\"wall_ns\":\"soon\"}\n" + good_line + "\n");
  auto set = read_trace_dir(dir_.string());
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().code(), errc::invalid_argument);
  EXPECT_THAT(set.error().message(), HasSubstr("worker-1.jsonl:2"));
  EXPECT_THAT(set.error().message(), HasSubstr("wall_ns"));
}

TEST_F(TraceFileTest, ALastLineCutShortIsSkippedAndCounted) {
  write("worker-1.jsonl", std::string{good_line} + "\n{\"wall_ns\":1,\"mo");
  auto set = read_trace_dir(dir_.string());
  ASSERT_TRUE(set) << set.error().to_string();
  EXPECT_EQ(set->records.size(), 1u);
  EXPECT_EQ(set->cut_lines, 1u);
}

/// good_line with `field` set to the JSON number `value` (added when it is not there).
std::string line_with(const std::string& field, const std::string& value) {
  auto j = nlohmann::json::parse(good_line);
  j[field] = nlohmann::json::parse(value);
  return j.dump();
}

TEST_F(TraceFileTest, ValuesOutOfTheirFieldsRangeAreRefusedNeverWrapped) {
  const std::string u64_max = "18446744073709551615";
  const std::string beyond = std::to_string(max_trace_ns + 1);
  const std::pair<std::string, std::string> cases[] = {
      {"dur_ns", u64_max},    {"wall_ns", u64_max}, {"mono_ns", u64_max},
      {"wall_ns", beyond},    {"dur_ns", beyond},   {"wall_ns", "-1"},
      {"node", "4294967296"}, {"pid", "-5"},        {"bytes", "-1"},
      {"step", "-2"},         {"job", u64_max},     {"value", "9223372036854775808"}};
  for (const auto& [field, value] : cases) {
    write("worker-1.jsonl", std::string{good_line} + "\n" + line_with(field, value) + "\n");
    auto set = read_trace_dir(dir_.string());
    ASSERT_FALSE(set) << field << " = " << value << " was read";
    EXPECT_EQ(set.error().code(), errc::invalid_argument);
    EXPECT_THAT(set.error().message(), HasSubstr("worker-1.jsonl:2"));
    EXPECT_THAT(set.error().message(),
                HasSubstr("\"" + field + "\" is " + value + ", out of range ["));
  }
  // The largest values that fit are read as they are.
  write("worker-1.jsonl",
        line_with("bytes", u64_max) + "\n" + line_with("step", "9223372036854775807") + "\n");
  auto set = read_trace_dir(dir_.string());
  ASSERT_TRUE(set) << set.error().to_string();
  EXPECT_EQ(set->records[0].record.bytes, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(set->records[1].record.step, std::numeric_limits<int64_t>::max());
}

TEST_F(TraceFileTest, ASpanThatWouldBeginBeforeItsClockIsRefused) {
  write("worker-1.jsonl", line_with("dur_ns", "7") + "\n");  // mono_ns is 6
  auto set = read_trace_dir(dir_.string());
  ASSERT_FALSE(set);
  EXPECT_THAT(set.error().message(), HasSubstr("worker-1.jsonl:1"));
  EXPECT_THAT(set.error().message(), HasSubstr("\"dur_ns\" 7 is longer than \"mono_ns\" 6"));
}

TEST_F(TraceFileTest, AWallClockFarFromTheProcesssOtherRecordsIsRefused) {
  constexpr int64_t hour = int64_t{3600} * 1000 * 1000 * 1000;
  // Within a day of the process's first record (a clock step): read.
  write("worker-42-r0.0.jsonl",
        std::string{good_line} + "\n" + line_with("wall_ns", std::to_string(5 + 23 * hour)) + "\n");
  ASSERT_TRUE(read_trace_dir(dir_.string()));
  // 57 years away, in another file of the same process: refused, naming both records.
  write("worker-42-r1.0.jsonl",
        line_with("wall_ns", std::to_string(5 + int64_t{57} * 365 * 24 * hour)) + "\n");
  auto set = read_trace_dir(dir_.string());
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().code(), errc::invalid_argument);
  EXPECT_THAT(set.error().message(), HasSubstr("worker-42-r1.0.jsonl:1: \"wall_ns\""));
  EXPECT_THAT(set.error().message(), HasSubstr("worker-42-r0.0.jsonl:1"));
  EXPECT_THAT(set.error().message(), HasSubstr("more than a day"));
}

TEST_F(TraceFileTest, ASymlinkLoopIsOneErrorNamingIt) {
  write("worker-1.jsonl", std::string{good_line} + "\n");
  std::filesystem::create_symlink(dir_ / "worker-2.jsonl", dir_ / "worker-2.jsonl");
  auto set = read_trace_dir(dir_.string());
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().code(), errc::io_error);
  EXPECT_THAT(set.error().message(),
              HasSubstr("trace: cannot read " + (dir_ / "worker-2.jsonl").string() + ": "));
  EXPECT_THAT(set.error().message(), HasSubstr("symbolic links"));

  const auto loop_dir = dir_ / "loop";
  std::filesystem::create_directory_symlink(loop_dir, loop_dir);
  auto d = read_trace_dir(loop_dir.string());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code(), errc::io_error);
  EXPECT_THAT(d.error().message(), HasSubstr("trace: cannot read " + loop_dir.string() + ": "));
}

TEST_F(TraceFileTest, ADirectoryWithoutTraceFilesIsNotFound) {
  auto set = read_trace_dir(dir_.string());
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().code(), errc::not_found);
}

}  // namespace
}  // namespace kvc::launch
