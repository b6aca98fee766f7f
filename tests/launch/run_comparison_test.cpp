// A run with offloading against one without (launch/engines/sim/run_comparison.hpp): only the
// requests finished in both runs count, and the scheduler process's list of finished requests
// travels as a JSON line and comes back the same, or is refused with one clear error.
#include "launch/engines/sim/run_comparison.hpp"

#include <gtest/gtest.h>

namespace kvc::sim {
namespace {

using nlohmann::json;

// Times in us: arrival, first token, finish; then output tokens and prefill tokens.
const std::vector<finished_request> on{
    {"c0.t0", 0, 1000, 3000, 10, 100},
    {"c1.t0", 0, 2000, 5000, 20, 50},
    {"c2.t0", 1000, 2000, 4000, 30, 70},  // not finished in the other run
};
const std::vector<finished_request> off{
    {"c1.t0", 0, 4000, 8000, 20, 300},
    {"c3.t0", 0, 1000, 99000, 5, 999},  // not finished in the other run
    {"c0.t0", 0, 3000, 6000, 10, 200},
};

TEST(RunComparisonTest, OnlyTheRequestsFinishedInBothRunsCount) {
  const run_comparison c = compare_finished(on, off);
  EXPECT_EQ(c.requests, 2u);  // c0.t0 and c1.t0
  EXPECT_EQ(c.on.prefill_tokens_computed, 150u);
  EXPECT_EQ(c.off.prefill_tokens_computed, 500u);
  EXPECT_EQ(c.on.output_tokens, 30u);
  EXPECT_EQ(c.off.output_tokens, 30u);
  // TTFT p50 (nearest rank of two: the lower one) and the time the last of them finished.
  EXPECT_DOUBLE_EQ(c.on.ttft_p50_ms, 1.0);
  EXPECT_DOUBLE_EQ(c.off.ttft_p50_ms, 3.0);
  EXPECT_DOUBLE_EQ(c.on.sim_seconds, 0.005);
  EXPECT_DOUBLE_EQ(c.off.sim_seconds, 0.008);
  EXPECT_DOUBLE_EQ(c.on.output_tokens_per_s, 6000.0);
  EXPECT_DOUBLE_EQ(c.off.output_tokens_per_s, 3750.0);

  const json on_line{{"event", "summary"}, {"requests_finished", 3}};
  const json off_line{{"event", "summary"}, {"requests_finished", 3}, {"offload", false}};
  const json j = compare_json(on_line, off_line, c);
  EXPECT_EQ(j.at("event"), "compare");
  EXPECT_EQ(j.at("offload_on"), on_line);
  EXPECT_EQ(j.at("offload_off"), off_line);
  EXPECT_EQ(j.at("requests_compared"), 2);
  EXPECT_EQ(j.at("prefill_tokens_saved"), 350);
  EXPECT_DOUBLE_EQ(j.at("ttft_p50_ratio").get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j.at("throughput_ratio").get<double>(), 1.6);
  EXPECT_DOUBLE_EQ(j.at("sim_time_ratio").get<double>(), 1.6);
  EXPECT_EQ(j.at("compared_on").at("prefill_tokens_computed"), 150);
  EXPECT_EQ(j.at("compared_off").at("output_tokens_per_s"), 3750.0);
  const std::string table = compare_table(on_line, off_line, c);
  EXPECT_NE(table.find("2, finished in both runs (3 vs 3 finished)"), std::string::npos) << table;
}

TEST(RunComparisonTest, NothingInCommonGivesRatiosOfZeroNotADivisionByZero) {
  const run_comparison c = compare_finished(on, {});
  EXPECT_EQ(c.requests, 0u);
  const json j = compare_json(json::object(), json::object(), c);
  EXPECT_EQ(j.at("requests_compared"), 0);
  EXPECT_EQ(j.at("prefill_tokens_saved"), 0);
  for (const char* k : {"ttft_p50_ratio", "throughput_ratio", "sim_time_ratio"}) {
    EXPECT_EQ(j.at(k), 0.0) << k;
  }
}

TEST(RunComparisonTest, TwoReportsAreComparedOverTheirFinishedRequests) {
  run_report a;
  a.finished = on;
  a.requests_finished = 3;
  a.prefill_tokens_computed = 220;  // the whole run's figures are not what is compared
  run_report b;
  b.offload = false;
  b.finished = off;
  const json j = compare_json(a, b);
  EXPECT_EQ(j, compare_json(summary_json(a), summary_json(b), compare_finished(on, off)));
  EXPECT_EQ(j.at("prefill_tokens_saved"), 350);
}

TEST(RunComparisonTest, TheFinishedLineComesBackTheSame) {
  const json line = finished_json(on);
  EXPECT_EQ(line.at("event"), "finished");
  EXPECT_EQ(line.at("requests").at(0), json::parse(R"(["c0.t0",0.0,1000.0,3000.0,10,100])"));
  auto back = finished_from_json(json::parse(line.dump()));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, on);
  auto none = finished_from_json(finished_json({}));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(RunComparisonTest, ABadFinishedLineIsOneClearError) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"event":"finished"})", "no \"requests\" array"},
      {R"({"requests":[["a",0,1,2,3]]})", "entry 0 is not [id,"},
      {R"({"requests":[[7,0,1,2,3,4]]})", "entry 0 is not [id,"},
      {R"({"requests":[["a",0,1,2,3,4],["b",-1,1,2,3,4]]})", "entry 1: a time"},
      {R"({"requests":[["a",0,1,"2",3,4]]})", "entry 0: a time"},
      {R"({"requests":[["a",0,1,2,-3,4]]})", "entry 0: a token count"},
      {R"({"requests":[["a",0,1,2,3,4.5]]})", "entry 0: a token count"},
      {R"({"requests":[["a",0,1,2,3,4],["a",0,1,2,3,4]]})", "request a is given twice"},
  };
  for (const auto& [text, want] : cases) {
    auto r = finished_from_json(json::parse(text));
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code(), errc::invalid_argument) << text;
    EXPECT_NE(r.error().to_string().find(want), std::string::npos)
        << text << ": " << r.error().to_string();
  }
}

}  // namespace
}  // namespace kvc::sim
