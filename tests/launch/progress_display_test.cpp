// The launch's progress line (progress_display, pure): its text from the scheduler's progress
// lines, a plain line per interval off a terminal, one rewritten line on a terminal.
#include "launch/supervisor/progress_display.hpp"

#include <gtest/gtest.h>

namespace kvc::launch {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using clock_t_ = progress_display::clock;

json sim_progress(uint64_t step) {
  return {{"event", "progress"},        {"step", step},
          {"steps", 200},               {"requests_finished", 31},
          {"requests_running", 4},      {"prefill_tokens_computed", 700},
          {"cpu_hit_tokens", 100},      {"gpu_hit_tokens", 50},
          {"jobs_failed", 2}};
}

TEST(ProgressDisplayTest, TheTextNamesTheSimulatedRunsFigures) {
  EXPECT_EQ(progress_text(sim_progress(120), 74.25),
            "progress: step 120/200, 74.2 steps/s, requests finished 31, cpu hit 12.5%, "
            "jobs failed 2");
}

TEST(ProgressDisplayTest, PastTheStepsWithArrivalsTheTextSaysTheRunIsDraining) {
  EXPECT_EQ(progress_text(sim_progress(200), 0).find("draining"), std::string::npos);
  EXPECT_EQ(progress_text(sim_progress(201), 0),
            "progress: step 201/200 (draining), 0.0 steps/s, requests finished 31, cpu hit 12.5%, "
            "jobs failed 2");
}

TEST(ProgressDisplayTest, TheTextHasTheSmokeRunsFieldsWhenThoseAreWhatItGot) {
  const json smoke{{"event", "progress"}, {"step", 7}, {"steps", 50}, {"jobs_ok", 6},
                   {"jobs_failed", 0}};
  EXPECT_EQ(progress_text(smoke, 0), "progress: step 7/50, 0.0 steps/s, jobs ok 6, jobs failed 0");
}

TEST(ProgressDisplayTest, OffATerminalALineEveryIntervalAndTheFirstAtOnce) {
  progress_display d(false, milliseconds{1000});
  const clock_t_::time_point t0{};
  auto first = d.on_progress(sim_progress(1), t0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first,
            "kvconnect launch: progress: step 1/200, 0.0 steps/s, requests finished 31, "
            "cpu hit 12.5%, jobs failed 2\n");
  EXPECT_FALSE(d.on_progress(sim_progress(50), t0 + milliseconds{999}).has_value());
  auto next = d.on_progress(sim_progress(101), t0 + milliseconds{1000});
  ASSERT_TRUE(next.has_value());
  EXPECT_NE(next->find("step 101/200, 100.0 steps/s"), std::string::npos) << *next;
  EXPECT_EQ(d.close(), "");  // plain lines end with their newline
}

TEST(ProgressDisplayTest, AnIntervalOfZeroShowsNothingOffATerminal) {
  progress_display d(false, milliseconds{0});
  EXPECT_FALSE(d.on_progress(sim_progress(1), clock_t_::time_point{}).has_value());
}

TEST(ProgressDisplayTest, OnATerminalEveryStepRewritesOneLineClosedBeforeOtherOutput) {
  progress_display d(true, milliseconds{0});  // the interval is for plain lines only
  const clock_t_::time_point t0{};
  for (uint64_t s = 1; s <= 3; ++s) {
    auto text = d.on_progress(sim_progress(s), t0 + milliseconds{s});
    ASSERT_TRUE(text.has_value());
    EXPECT_EQ(text->front(), '\r');
    EXPECT_EQ(text->substr(text->size() - 3), "\033[K");
    EXPECT_EQ(text->find('\n'), std::string::npos);
  }
  EXPECT_EQ(d.close(), "\n");
  EXPECT_EQ(d.close(), "");  // once
}

}  // namespace
}  // namespace kvc::launch
