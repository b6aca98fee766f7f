// What a launch shows on stderr of its children's JSON lines: one short sentence each at log
// level info (issue 23: the relayed lines were a wall of numbers, a worker's runner line alone
// 5.7 MB at 400,000 steps), per-step lines never, anything that is no event as it came.
#include "launch/supervisor/child_lines.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kvc::launch {
namespace {

using nlohmann::json;

std::optional<std::string> text_of(const std::string& line) {
  return child_line_text(parse_child_line(line), line);
}

std::optional<std::string> text_of(const child_event& e) {
  return text_of(to_line(e));
}

TEST(ChildLinesTest, EachKnownLineIsOneSentence) {
  EXPECT_EQ(text_of(listening_event{.port = 37843,
                                    .segment = "/kvc-0-a-node0",
                                    .world_size = 4,
                                    .executor = "tcp://127.0.0.1:37844",
                                    .pid = 7}),
            "listening on port 37843 for 4 ranks; segment /kvc-0-a-node0");
  EXPECT_EQ(text_of(listening_event{.world_size = 2, .executor = "tcp://127.0.0.1:9", .pid = 7}),
            "without offloading (no connector, no pool) for 2 ranks; executor tcp://127.0.0.1:9");
  EXPECT_EQ(text_of(ready_event{4}), "every rank ready (4 ranks): running");
  EXPECT_EQ(text_of(registered_event{1, 0, 9}), "registered as rank 1");
  EXPECT_EQ(text_of(registered_event{1, 2, 9}), "registered as rank 1 (incarnation 2)");
  EXPECT_EQ(text_of(runner_event{.rank = 0,
                                 .steps = 120,
                                 .loads_verified = 1,
                                 .load_mismatches = 0,
                                 .step_errors = 0,
                                 .connector_ns = 5}),
            "ran 120 steps: 1 load verified, 0 mismatches, 0 step errors");
  EXPECT_EQ(text_of(stopped_event{.workers = 4}), "stopped (4 workers)");
  EXPECT_EQ(text_of(stopped_event{.rank = 3}), "stopped");
  EXPECT_EQ(text_of(smoke_event{.steps = 200, .jobs_ok = 200, .jobs_failed = 0}),
            "the smoke run passed: 200 steps, 200 jobs completed, 0 failed");
  EXPECT_EQ(text_of(sim_event{json{{"ok", false},
                                   {"steps", 2},
                                   {"requests_finished", 0},
                                   {"requests_aborted", 0},
                                   {"jobs_failed", 1},
                                   {"problems", {"step 2: timeout"}}}}),
            "the simulated run failed after 2 steps: 0 requests finished, 0 aborted, 1 job "
            "failed; step 2: timeout");
  fault_outcome o;
  o.fired[static_cast<size_t>(fault_kind::drop_report)] = 1;
  o.fired[static_cast<size_t>(fault_kind::fail_copy)] = 2;
  o.jobs_failed = 3;
  EXPECT_EQ(text_of(fault_report_event{o}),
            "fault report: 3 faults fired, 3 jobs failed; the invariants hold");
  EXPECT_EQ(text_of(rank_lost_event{1, 0}), "rank 1 (incarnation 0) is lost");
  EXPECT_EQ(text_of(device_lost_event{1, 0, "gone", {}}), "rank 1 lost its device: gone");
}

TEST(ChildLinesTest, PerStepLinesAreNotShownAndLinesThatAreNoEventAreShownAsTheyCame) {
  EXPECT_EQ(text_of(R"({"event":"progress","step":3,"steps":200})"), std::nullopt);
  EXPECT_EQ(text_of(R"({"event":"connector_steps","rank":0,"ns":[[1,5],[2,6]]})"),
            std::nullopt);
  EXPECT_EQ(text_of(R"({"event":"finished","requests":[["c0.t0",0,1,2,3,4]]})"), std::nullopt);
  EXPECT_EQ(text_of(R"({"event":"something_new","x":1})"), R"({"event":"something_new","x":1})");
  EXPECT_EQ(text_of("not json at all"), "not json at all");
  EXPECT_EQ(text_of(R"([1,2])"), "[1,2]");
  EXPECT_EQ(text_of(R"({"event":"ready"})"), R"({"event":"ready"})");  // a field missing
}

}  // namespace
}  // namespace kvc::launch
