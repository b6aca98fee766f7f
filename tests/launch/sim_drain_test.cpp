// The simulated engine's phases (launch/engines/sim/engine_loop.hpp) without offloading, so
// without processes or shm: after the steps with arrivals the drain lets what arrived finish;
// only at the drain's bound is what is left aborted, and an aborted request is counted apart,
// outside TTFT and throughput.
#include "launch/engines/sim/engine_loop.hpp"

#include <gtest/gtest.h>

#include "launch/config/config_loader.hpp"

namespace kvc::sim {
namespace {

launch::launch_config config_with(std::vector<std::string> sets) {
  auto loaded = launch::load_config("", "<test>", sets);
  EXPECT_TRUE(loaded.ok());
  return loaded.config;
}

/// The engine loop with offloading off: the model costs simulated time only.
run_report run_without_connector(const launch::launch_config& c) {
  loop_options lo;
  lo.run_model = [](const model_input&) -> result<double> { return 0.0; };
  return run_engine_loop(c, nullptr, lo);
}

/// TTFT and throughput describe exactly the finished requests.
void expect_figures_of_the_finished(const run_report& r) {
  ASSERT_EQ(r.finished.size(), r.requests_finished);
  uint64_t tokens = 0;
  std::vector<double> ttft;
  for (const auto& f : r.finished) {
    tokens += f.output_tokens;
    ttft.push_back(f.ttft_us());
  }
  EXPECT_EQ(r.output_tokens, tokens);
  EXPECT_DOUBLE_EQ(r.output_tokens_per_s, static_cast<double>(tokens) / r.sim_seconds);
  EXPECT_DOUBLE_EQ(r.ttft_p50_ms, percentile(ttft, 50) / 1000.0);
  EXPECT_DOUBLE_EQ(r.ttft_p99_ms, percentile(ttft, 99) / 1000.0);
}

TEST(SimDrainTest, TheDefaultWorkloadFinishesEveryRequestThatArrived) {
  const auto c = config_with({});
  ASSERT_EQ(c.workload.steps, 200u);
  ASSERT_EQ(c.workload.drain_steps, 1000u);
  const run_report r = run_without_connector(c);
  EXPECT_TRUE(r.ok()) << summary_json(r).dump();
  EXPECT_EQ(r.requests_arrived, 110u);
  EXPECT_EQ(r.requests_finished, 110u);
  EXPECT_EQ(r.requests_aborted, 0u);
  EXPECT_EQ(r.hung_requests, 0u);
  EXPECT_EQ(r.steps, 459u);  // 200 with arrivals, 259 of the drain until the last one finished
  expect_figures_of_the_finished(r);
}

TEST(SimDrainTest, AtTheDrainsBoundWhatIsLeftIsAbortedAndCountedApart) {
  const auto c = config_with({"workload.drain_steps=10"});
  const run_report r = run_without_connector(c);
  EXPECT_TRUE(r.ok()) << summary_json(r).dump();  // aborted is not hung: everything released
  EXPECT_EQ(r.requests_arrived, 110u);
  EXPECT_EQ(r.requests_finished, 50u);  // 3 more than with no drain
  EXPECT_EQ(r.requests_aborted, 60u);
  EXPECT_EQ(r.steps, 210u);  // 200 with arrivals, 10 of the drain; the aborts left nothing
  expect_figures_of_the_finished(r);
}

TEST(SimDrainTest, ADrainOfNoStepsAbortsAtOnceAsBefore) {
  const auto c = config_with({"workload.drain_steps=0"});
  const run_report r = run_without_connector(c);
  EXPECT_EQ(r.requests_arrived, 110u);
  EXPECT_EQ(r.requests_finished, 47u);
  EXPECT_EQ(r.requests_aborted, 63u);
  EXPECT_EQ(r.steps, 200u);
  expect_figures_of_the_finished(r);
}

}  // namespace
}  // namespace kvc::sim
