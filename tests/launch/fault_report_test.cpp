// The launch side of fault injection: --fault options with "did you mean", and the fault
// report's JSON line and exit code.
#include "launch/config/fault_options.hpp"
#include "launch/config/fault_report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvc::launch {
namespace {

using ::testing::HasSubstr;

TEST(FaultOptionsTest, AMisspeltKindOrKeyGetsADidYouMean) {
  auto kind = parse_fault_option("dupicate_report:p=1");
  ASSERT_FALSE(kind.ok());
  EXPECT_THAT(kind.error().message(), HasSubstr("did you mean \"duplicate_report\"?"));
  auto key = parse_fault_option("hang_rank:rank=1,step=3,resme=10");
  ASSERT_FALSE(key.ok());
  EXPECT_THAT(key.error().message(), HasSubstr("did you mean \"resume\"?"));
  auto far = parse_fault_option("nonsense:p=1");
  ASSERT_FALSE(far.ok());
  EXPECT_THAT(far.error().message(), ::testing::Not(HasSubstr("did you mean")));
  auto value = parse_fault_option("drop_report:p=2");  // no word to suggest
  ASSERT_FALSE(value.ok());
  EXPECT_THAT(value.error().message(), ::testing::Not(HasSubstr("did you mean")));
}

TEST(FaultOptionsTest, TheFirstBadSpecIsTheError) {
  const std::vector<std::string> texts{"drop_report:p=0.5", "kill_rank:rank=1"};
  auto c = parse_fault_options(texts, 3);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message(), HasSubstr("\"kill_rank:rank=1\": needs step=N"));
  auto ok = parse_fault_options(std::vector<std::string>{"drop_report:p=0.5"}, 3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->seed, 3u);
  EXPECT_EQ(ok->specs.size(), 1u);
}

TEST(FaultReportTest, OneLineWithEveryKindAndTheInvariants) {
  fault_outcome o;
  o.seed = 42;
  o.fired[static_cast<size_t>(fault_kind::drop_report)] = 3;
  o.fired[static_cast<size_t>(fault_kind::fail_copy)] = 2;
  o.jobs_failed = 5;
  o.late_reports_dropped = 1;
  EXPECT_EQ(fault_report_line(o),
            "{\"event\":\"fault_report\",\"seed\":42,\"fired\":{\"drop_report\":3,"
            "\"duplicate_report\":0,\"delay_report\":0,\"reorder_reports\":0,\"corrupt_frame\":0,"
            "\"fail_copy\":2,\"delay_copy\":0,\"kill_rank\":0,\"hang_rank\":0,"
            "\"kill_scheduler\":0,\"lose_device\":0,\"fail_io\":0},\"jobs_failed\":5,"
            "\"jobs_recovered\":0,"
            "\"requests_recomputed\":0,\"late_reports_dropped\":1,\"duplicates_dropped\":0,"
            "\"hung_requests\":0,\"leaked_slots\":0,\"pending_jobs\":0,\"load_mismatches\":0,"
            "\"double_completions\":0,\"invariants_ok\":true}");
  EXPECT_TRUE(invariants_ok(o));
  EXPECT_EQ(fault_report_exit_code(o, 0), 0);
}

TEST(FaultReportTest, AnyBrokenInvariantIsExitCodeThree) {
  for (uint64_t fault_outcome::*field :
       {&fault_outcome::hung_requests, &fault_outcome::leaked_slots, &fault_outcome::pending_jobs,
        &fault_outcome::load_mismatches, &fault_outcome::double_completions}) {
    fault_outcome o;
    o.*field = 1;
    EXPECT_FALSE(invariants_ok(o));
    EXPECT_EQ(fault_report_exit_code(o, 0), 3);
    EXPECT_THAT(fault_report_line(o), HasSubstr("\"invariants_ok\":false"));
  }
  fault_outcome failed_but_fine;
  failed_but_fine.jobs_failed = 7;  // failures are counted, not invariants
  EXPECT_EQ(fault_report_exit_code(failed_but_fine, 1), 1);
}

// Issue 23: a launch's summary said 61 hung requests (exit 1) while its fault report said 0 and
// invariants_ok true. The report now takes the summary's counts: one source for both lines.
TEST(FaultReportTest, ALaunchsReportTakesItsInvariantsFromTheSummary) {
  nlohmann::json report = nlohmann::json::parse(fault_report_line(fault_outcome{.seed = 3}));
  ASSERT_TRUE(invariants_ok(report));
  const nlohmann::json summary{{"hung_requests", 61}, {"pending_jobs", 0},
                               {"double_completions", 0}, {"load_mismatches", 0},
                               {"busy_slots", 0}, {"steps", 2}};
  take_invariants(report, summary);
  EXPECT_EQ(report.at("hung_requests"), 61);
  EXPECT_EQ(report.at("invariants_ok"), false);
  EXPECT_FALSE(invariants_ok(report));
  EXPECT_FALSE(report.contains("steps"));  // the counts of the invariants only
  // Each count of the summary, and the workers' exit after kill_scheduler, decides alone.
  for (const char* key : {"pending_jobs", "double_completions", "load_mismatches", "busy_slots"}) {
    nlohmann::json one = nlohmann::json::parse(fault_report_line(fault_outcome{}));
    take_invariants(one, {{key, 1}});
    EXPECT_EQ(one.at("invariants_ok"), false) << key;
  }
  nlohmann::json orphaned = nlohmann::json::parse(fault_report_line(fault_outcome{}));
  orphaned["workers_exited_on_their_own"] = false;
  EXPECT_FALSE(invariants_ok(orphaned));
  nlohmann::json clean = nlohmann::json::parse(fault_report_line(fault_outcome{}));
  take_invariants(clean, {{"hung_requests", 0}, {"busy_slots", 0}});
  EXPECT_EQ(clean.at("invariants_ok"), true);
}

}  // namespace
}  // namespace kvc::launch
