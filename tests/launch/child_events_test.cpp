// The launcher's child protocol (launch/roles/child_events.hpp): every event a role process prints
// reads back as the same event, and a line that is none is one clear error.
#include "launch/roles/child_events.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvc::launch {
namespace {

using nlohmann::json;

std::vector<child_event> one_of_each() {
  fault_outcome outcome{.seed = 7, .jobs_failed = 3, .pending_jobs = 1};
  outcome.fired[static_cast<size_t>(fault_kind::drop_report)] = 2;
  return {
      listening_event{.port = 37843,
                      .segment = "/kvc-0-a-node0",
                      .layout_checksum = 0xfeedu,
                      .world_size = 4,
                      .executor = "tcp://127.0.0.1:37844",
                      .pid = 7,
                      .metrics_port = 9400,
                      .kv_events_endpoint = "tcp://*:5557",
                      .kv_events_replay_endpoint = ""},
      ready_event{4},
      progress_event{3, json{{"event", "progress"}, {"step", 3}, {"steps", 200}, {"jobs_ok", 9}}},
      smoke_event{200, 199, 1, 2, 512, 1 << 20},
      sim_event{json{{"event", "sim"}, {"ok", true}, {"steps", 5}, {"problems", json::array()}}},
      finished_event{json{{"event", "finished"}, {"requests", {{"c0.t0", 0, 1, 2, 3, 4}}}}},
      rank_lost_event{3, 1},
      fault_report_event{outcome},
      stopped_event{.workers = 4},
      stopped_event{.rank = 2},
      stopped_event{.rank = 2, .fired = fired_faults{{"fail_copy", 1}, {"delay_copy", 0}}},
      registered_event{5, 2, 4242},
      runner_event{.rank = 1,
                   .steps = 10,
                   .tokens_written = 100,
                   .loads_verified = 4,
                   .load_mismatches = 1,
                   .blocks_load_failed = 2,
                   .step_errors = 0,
                   .steps_connector_only = 1,
                   .steps_skipped = 0,
                   .connector_ns = 12345,
                   .mismatches = {"block 3: byte 0 differs"}},
      connector_steps_event{1, {{1, 500}, {2, 600}}},
      device_lost_event{2, 0, "injected lose_device", fired_faults{{"lose_device", 1}}},
  };
}

TEST(ChildEventsTest, EveryEventReadsBackAsItself) {
  for (const child_event& e : one_of_each()) {
    const std::string line = to_line(e);
    auto back = parse_child_line(line);
    ASSERT_TRUE(back.ok()) << line << ": " << back.error().to_string();
    EXPECT_EQ(*back, e) << line;
    EXPECT_EQ(event_name(*back), event_name(e));
    EXPECT_EQ(to_line(*back), line);
    EXPECT_EQ(json::parse(line)["event"], std::string{event_name(e)});
  }
}

// What the role processes printed before the protocol had types, byte for byte: the launcher
// and any reader of a role process's stdout see the same lines.
TEST(ChildEventsTest, LinesKeepTheirBytes) {
  EXPECT_EQ(to_line(ready_event{4}), R"({"event":"ready","world_size":4})");
  EXPECT_EQ(to_line(registered_event{1, 0, 9}),
            R"({"event":"registered","incarnation":0,"pid":9,"rank":1})");
  EXPECT_EQ(to_line(stopped_event{.workers = 2}), R"({"event":"stopped","workers":2})");
  EXPECT_EQ(to_line(connector_steps_event{0, {{1, 5}}}),
            R"({"event":"connector_steps","ns":[[1,5]],"rank":0})");
  const fault_outcome o{.seed = 9};
  EXPECT_EQ(to_line(fault_report_event{o}), fault_report_line(o));
}

TEST(ChildEventsTest, ALineThatIsNoEventIsOneClearError) {
  auto error_of = [](const std::string& line) {
    auto r = parse_child_line(line);
    EXPECT_FALSE(r.ok()) << line;
    if (r.ok()) return std::string{};
    EXPECT_EQ(r.error().code(), errc::invalid_argument);
    return r.error().message();
  };
  EXPECT_EQ(error_of("not json"), "not a JSON object");
  EXPECT_EQ(error_of("[1,2]"), "not a JSON object");
  EXPECT_EQ(error_of(R"({"port":1})"), "no \"event\" string");
  EXPECT_EQ(error_of(R"({"event":7})"), "no \"event\" string");
  EXPECT_EQ(error_of(R"({"event":"dance"})"), "unknown event \"dance\"");
  EXPECT_EQ(error_of(R"({"event":"ready"})"), "event \"ready\": \"world_size\" is missing");
  EXPECT_EQ(error_of(R"({"event":"ready","world_size":-1})"),
            "event \"ready\": \"world_size\" is not an unsigned number");
  EXPECT_EQ(error_of(R"({"event":"rank_lost","rank":1,"incarnation":4294967296})"),
            "event \"rank_lost\": \"incarnation\" is not a 32-bit unsigned number");
  EXPECT_EQ(error_of(R"({"event":"connector_steps","rank":0,"ns":[[1]]})"),
            "event \"connector_steps\": \"ns\" is not a list of [step, ns] pairs");
  EXPECT_EQ(error_of(R"({"event":"stopped","rank":1,"fired":{"fail_copy":"x"}})"),
            "event \"stopped\": \"fired\" is not an object of counts");
  EXPECT_EQ(error_of(R"({"event":"sim","steps":1})"), "event \"sim\": \"ok\" is missing");
  // The first problem is the one named.
  EXPECT_EQ(error_of(R"({"event":"registered","pid":"x"})"),
            "event \"registered\": \"rank\" is missing");
}

}  // namespace
}  // namespace kvc::launch
