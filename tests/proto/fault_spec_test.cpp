// The fault config: the spec parser (each class of error), its canonical text, the pure
// decider's determinism and scoping, and the copy engine's rules derived per rank.
#include "proto/fault_decider.hpp"
#include "proto/fault_plan.hpp"
#include "proto/fault_spec_parser.hpp"
#include "proto/tier_fault_decider.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kvc {
namespace {

fault_spec parse(const std::string& text) {
  auto f = parse_fault_spec(text);
  EXPECT_TRUE(f.ok()) << text << ": " << f.error().to_string();
  return f ? *f : fault_spec{};
}

/// The error message of a spec that must not parse.
std::string error_of(const std::string& text) {
  auto f = parse_fault_spec(text);
  EXPECT_FALSE(f.ok()) << text << " parsed";
  if (f.ok()) return {};
  EXPECT_EQ(f.error().code(), errc::invalid_argument);
  return f.error().message();
}

TEST(FaultSpecParserTest, ReadsTheIssuesExamples) {
  const fault_spec drop = parse("drop_report:rank=1,p=0.05");
  EXPECT_EQ(drop.kind, fault_kind::drop_report);
  EXPECT_EQ(drop.rank, rank_id{1});
  EXPECT_EQ(drop.trigger, fault_trigger::probability);
  EXPECT_DOUBLE_EQ(drop.probability, 0.05);

  const fault_spec kill = parse("kill_rank:rank=2,step=300");
  EXPECT_EQ(kill.kind, fault_kind::kill_rank);
  EXPECT_EQ(kill.rank, rank_id{2});
  EXPECT_EQ(kill.first_step, 300u);
  EXPECT_EQ(kill.last_step, 300u);

  const fault_spec fail = parse("fail_copy:dir=load,at=completion,nth=3");
  EXPECT_EQ(fail.dir, fault_target::load);
  EXPECT_EQ(fail.at, fault_action::fail_at_completion);
  EXPECT_EQ(fail.trigger, fault_trigger::nth);
  EXPECT_EQ(fail.nth, 3u);
  EXPECT_FALSE(fail.rank.has_value());
}

TEST(FaultSpecParserTest, ReadsEveryKindsOwnKeys) {
  EXPECT_EQ(parse("delay_report:steps=10-20,p=1,by=3").delay_steps, 3u);
  EXPECT_EQ(parse("delay_report:steps=10-20,p=1,by=3").last_step, 20u);
  EXPECT_FALSE(parse("delay_report:steps=10-20,p=1,by=3").delay_ms);
  EXPECT_EQ(parse("delay_report:rank=1,ms=50,p=0.1").delay_ms, 50u);
  EXPECT_EQ(parse("delay_report:rank=1,ms=50,p=0.1").delay_steps, 0u);
  EXPECT_EQ(parse("corrupt_frame:nth=0,bits=5").bits, 5u);
  EXPECT_EQ(parse("delay_copy:dir=store,after=4,p=0.5,max=2").release_after, 4u);
  EXPECT_EQ(parse("delay_copy:dir=store,after=4,p=0.5,max=2").max_fires, 2u);
  EXPECT_EQ(parse("hang_rank:rank=1,step=5,resume=250").resume_ms, uint64_t{250});
  EXPECT_FALSE(parse("hang_rank:rank=1,step=5,resume=never").resume_ms.has_value());
  EXPECT_FALSE(parse("kill_scheduler:step=9").rank.has_value());
  EXPECT_EQ(parse("reorder_reports:steps=7-,p=0.1").last_step, UINT64_MAX);
  EXPECT_EQ(parse("duplicate_report:nth=4").kind, fault_kind::duplicate_report);
  EXPECT_EQ(parse("lose_device:rank=1,nth=3").kind, fault_kind::lose_device);
  EXPECT_EQ(site_of(fault_kind::lose_device), fault_site::copy);
  // A device is lost once: no max=; nor at= (it fails everything from then on).
  EXPECT_NE(parse_fault_spec("lose_device:nth=3,max=2").error().message().find("unknown key"),
            std::string::npos);
  EXPECT_NE(parse_fault_spec("lose_device:nth=3,at=submit").error().message().find("unknown key"),
            std::string::npos);
}

TEST(FaultSpecParserTest, EveryClassOfErrorIsOneClearLine) {
  const std::string kind = error_of("drop_reprot:p=1");
  EXPECT_NE(kind.find("unknown kind \"drop_reprot\""), std::string::npos) << kind;
  EXPECT_NE(kind.find("drop_report"), std::string::npos) << "lists the kinds: " << kind;

  const std::string key = error_of("drop_report:rnk=1,p=1");
  EXPECT_NE(key.find("unknown key \"rnk\""), std::string::npos) << key;
  EXPECT_NE(key.find("rank"), std::string::npos) << "lists the keys: " << key;
  // A key of another kind is unknown for this one.
  EXPECT_NE(error_of("drop_report:dir=load,p=1").find("unknown key \"dir\""), std::string::npos);

  EXPECT_NE(error_of("drop_report:rank=1,rank=2,p=1").find("twice"), std::string::npos);
  EXPECT_NE(error_of("drop_report:rank=x,p=1").find("not an unsigned integer"), std::string::npos);
  EXPECT_NE(error_of("drop_report:p=zero").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("drop_report:p=1.5").find("[0, 1]"), std::string::npos);
  EXPECT_NE(error_of("drop_report:rank=1").find("needs p="), std::string::npos);
  EXPECT_NE(error_of("drop_report:p=1,nth=2").find("together"), std::string::npos);
  EXPECT_NE(error_of("drop_report:steps=9-3,p=1").find("empty step range"), std::string::npos);
  EXPECT_NE(error_of("drop_report:steps=9,p=1").find("A-B"), std::string::npos);
  EXPECT_NE(error_of("drop_report:step=1,steps=1-2,p=1").find("together"), std::string::npos);
  EXPECT_NE(error_of("drop_report:").find("nothing after"), std::string::npos);
  EXPECT_NE(error_of("drop_report:p=1,").find("trailing"), std::string::npos);
  EXPECT_NE(error_of("drop_report:p").find("key=value"), std::string::npos);
  EXPECT_NE(error_of("fail_copy:dir=up,p=1").find("store, load or any"), std::string::npos);
  EXPECT_NE(error_of("fail_copy:at=later,p=1").find("submit or completion"), std::string::npos);
  EXPECT_NE(error_of("delay_report:by=0,p=1").find("by must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("delay_report:ms=0,p=1").find("ms must be >= 1"), std::string::npos);
  EXPECT_NE(error_of("delay_report:rank=1,by=2,ms=50,p=0.1").find("exactly one of by=N"),
            std::string::npos);
  EXPECT_NE(error_of("delay_report:rank=1,p=0.1").find("exactly one of by=N"), std::string::npos);
  EXPECT_NE(error_of("drop_report:ms=5,p=1").find("unknown key"), std::string::npos);
  EXPECT_NE(error_of("corrupt_frame:bits=0,p=1").find("bits"), std::string::npos);
  EXPECT_NE(error_of("kill_rank:rank=1").find("needs step="), std::string::npos);
  EXPECT_NE(error_of("kill_rank:step=3").find("needs rank="), std::string::npos);
  EXPECT_NE(error_of("hang_rank:rank=1,step=3,resume=soon").find("milliseconds or never"),
            std::string::npos);
  // The spec is quoted in every message.
  EXPECT_NE(error_of("kill_rank:step=3").find("\"kill_rank:step=3\""), std::string::npos);
}

TEST(FaultSpecParserTest, TheCanonicalTextParsesBackToTheSameSpec) {
  for (const char* text :
       {"drop_report:rank=1,p=0.05", "duplicate_report:steps=3-9,nth=2,max=1",
        "delay_report:rank=0,step=4,p=0.25,by=2", "delay_report:rank=1,ms=50,p=0.1",
        "reorder_reports:steps=5-,p=1",
        "corrupt_frame:nth=0,bits=3", "fail_copy:rank=3,dir=load,at=completion,nth=3",
        "fail_copy:dir=store,p=0.5", "delay_copy:after=2,p=0.125,max=4",
        "kill_rank:rank=2,step=300", "hang_rank:rank=1,step=5,resume=1500",
        "hang_rank:rank=1,step=5,resume=never", "kill_scheduler:step=12",
        "lose_device:rank=2,dir=store,nth=4", "lose_device:p=0.01",
        "fail_io:rank=1,op=read,p=0.25,max=3", "fail_io:op=write,nth=2", "fail_io:p=1"}) {
    const fault_spec f = parse(text);
    const std::string canonical = format_fault_spec(f);
    EXPECT_EQ(parse(canonical), f) << text << " -> " << canonical;
  }
  EXPECT_EQ(format_fault_spec(parse("fail_copy:nth=3,at=completion,dir=load")),
            "fail_copy:dir=load,at=completion,nth=3");
}

TEST(FaultSpecParserTest, EveryKindHasANameAndKeys) {
  ASSERT_EQ(fault_kind_names().size(), fault_kind_count);
  for (size_t k = 0; k < fault_kind_count; ++k) {
    EXPECT_EQ(fault_kind_names()[k], to_string(static_cast<fault_kind>(k)));
    EXPECT_FALSE(fault_spec_keys(static_cast<fault_kind>(k)).empty());
  }
}

TEST(FaultConfigTest, ValidateNamesTheBadSpec) {
  fault_config c;
  c.specs.push_back(parse("drop_report:p=0.5"));
  fault_spec bad = parse("drop_report:p=0.5");
  bad.probability = 2.0;
  c.specs.push_back(bad);
  const status s = validate(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fault spec 1"), std::string::npos) << s.message();
}

std::vector<int> decisions(fault_decider& d, rank_id rank, step_id from, step_id to) {
  std::vector<int> out;
  for (step_id s = from; s < to; ++s) {
    auto f = d.next(rank, s);
    out.push_back(f ? static_cast<int>(f->spec) : -1);
  }
  return out;
}

TEST(FaultDeciderTest, TheSameSeedGivesTheSameFaults) {
  fault_config c{.seed = 42,
                 .specs = {parse("drop_report:p=0.3"), parse("duplicate_report:p=0.3")}};
  auto a = fault_decider::make(c, fault_site::channel);
  auto b = fault_decider::make(c, fault_site::channel);
  ASSERT_TRUE(a.ok() && b.ok());
  const auto da = decisions(*a, 0, 0, 500);
  EXPECT_EQ(da, decisions(*b, 0, 0, 500));
  EXPECT_EQ(a->fired(), b->fired());
  size_t drops = 0;
  for (int d : da) drops += d == 0 ? 1 : 0;
  EXPECT_GT(drops, 100u);  // p = 0.3 of 500, far from both ends
  EXPECT_LT(drops, 200u);
  c.seed = 43;
  auto other = fault_decider::make(c, fault_site::channel);
  EXPECT_NE(da, decisions(*other, 0, 0, 500));
}

TEST(FaultDeciderTest, ASpecsDecisionsDoNotDependOnOtherRanksOccurrences) {
  // Rank 1's drops are the same whether or not rank 0's reports pass in between.
  fault_config c{.seed = 7, .specs = {parse("drop_report:rank=1,p=0.5")}};
  auto alone = fault_decider::make(c, fault_site::channel);
  auto mixed = fault_decider::make(c, fault_site::channel);
  std::vector<bool> a;
  std::vector<bool> m;
  for (step_id s = 0; s < 200; ++s) {
    a.push_back(alone->next(1, s).has_value());
    EXPECT_FALSE(mixed->next(0, s).has_value());  // out of scope: never fires
    m.push_back(mixed->next(1, s).has_value());
  }
  EXPECT_EQ(a, m);
}

TEST(FaultDeciderTest, NthStepRangeAndMaxFiresScopeTheFaults) {
  fault_config c{.seed = 1,
                 .specs = {parse("duplicate_report:rank=2,nth=3"),
                           parse("drop_report:steps=10-12,p=1"), parse("corrupt_frame:p=1,max=2")}};
  auto d = fault_decider::make(c, fault_site::channel);
  ASSERT_TRUE(d.ok());
  std::vector<int> got;
  for (step_id s = 0; s < 14; ++s) {
    auto f = d->next(2, s);
    got.push_back(f ? static_cast<int>(f->kind) : -1);
  }
  const int dup = static_cast<int>(fault_kind::duplicate_report);
  const int drop = static_cast<int>(fault_kind::drop_report);
  const int corrupt = static_cast<int>(fault_kind::corrupt_frame);
  // Corrupt fires on the first two occurrences, except where an earlier spec decided.
  const std::vector<int> want{corrupt, corrupt, -1, dup,  -1,   -1,   -1,
                              -1,      -1,      -1, drop, drop, drop, -1};
  EXPECT_EQ(got, want);
  EXPECT_EQ(d->fired()[static_cast<size_t>(fault_kind::drop_report)], 3u);
  EXPECT_EQ(d->fired()[static_cast<size_t>(fault_kind::duplicate_report)], 1u);
  EXPECT_EQ(d->fired()[static_cast<size_t>(fault_kind::corrupt_frame)], 2u);
}

TEST(FaultDeciderTest, KeepsOnlyTheSpecsOfItsSite) {
  fault_config c{.seed = 0,
                 .specs = {parse("fail_copy:p=1"), parse("kill_rank:rank=0,step=1"),
                           parse("drop_report:nth=0")}};
  auto d = fault_decider::make(c, fault_site::channel);
  ASSERT_EQ(d->config().specs.size(), 1u);
  EXPECT_EQ(d->next(0, 0)->kind, fault_kind::drop_report);
  c.specs[0].probability = -1;
  EXPECT_FALSE(fault_decider::make(c, fault_site::channel).ok());  // every spec is checked
}

TEST(FaultConfigTest, CopyFaultsBecomeTheRanksCopyEngineRules) {
  fault_config c{
      .seed = 5,
      .specs = {parse("fail_copy:rank=1,dir=load,at=completion,nth=3"),
                parse("delay_copy:dir=store,after=2,p=0.5,max=4"), parse("drop_report:p=1")}};
  const fault_plan r0 = copy_fault_plan(c, 0);
  ASSERT_EQ(r0.rules.size(), 1u);  // rank 1's rule and the channel fault are not rank 0's
  EXPECT_EQ(r0.rules[0].action, fault_action::delay);
  EXPECT_EQ(r0.rules[0].target, fault_target::store);
  EXPECT_EQ(r0.rules[0].release_after, 2u);
  EXPECT_EQ(r0.rules[0].max_fires, 4u);
  const fault_plan r1 = copy_fault_plan(c, 1);
  ASSERT_EQ(r1.rules.size(), 2u);
  EXPECT_EQ(r1.rules[0].action, fault_action::fail_at_completion);
  EXPECT_EQ(r1.rules[0].target, fault_target::load);
  EXPECT_EQ(r1.rules[0].trigger, fault_trigger::nth);
  EXPECT_EQ(r1.rules[0].nth, 3u);
  EXPECT_NE(r0.seed, r1.seed);  // the ranks draw independently
  EXPECT_EQ(copy_fault_plan(c, 1).seed, r1.seed);
  EXPECT_TRUE(validate(r1).ok());

  const fault_config lost{.seed = 1, .specs = {parse("lose_device:rank=0,dir=load,nth=2")}};
  const fault_plan l0 = copy_fault_plan(lost, 0);
  ASSERT_EQ(l0.rules.size(), 1u);
  EXPECT_EQ(l0.rules[0].action, fault_action::lose_device);
  EXPECT_EQ(l0.rules[0].target, fault_target::load);
  EXPECT_EQ(l0.rules[0].nth, 2u);
  EXPECT_TRUE(copy_fault_plan(lost, 1).rules.empty());
}

TEST(FaultSpecParserTest, FailIoTakesAnOpAndActsAtTheTier) {
  const fault_spec f = parse("fail_io:rank=1,op=write,p=0.5,max=2");
  EXPECT_EQ(f.kind, fault_kind::fail_io);
  EXPECT_EQ(site_of(f.kind), fault_site::tier);
  EXPECT_EQ(f.rank, rank_id{1});
  EXPECT_EQ(f.op, fault_io_op::write);
  EXPECT_DOUBLE_EQ(f.probability, 0.5);
  EXPECT_EQ(f.max_fires, 2u);
  EXPECT_EQ(parse("fail_io:nth=0").op, fault_io_op::any);
  EXPECT_NE(error_of("fail_io:op=both,p=1").find("op=both: expected read, write or any"),
            std::string::npos);
  EXPECT_NE(error_of("fail_io:op=read").find("needs p=X"), std::string::npos);
  EXPECT_NE(error_of("fail_io:dir=load,p=1").find("unknown key \"dir\""), std::string::npos);
  EXPECT_NE(error_of("fail_io:p=1.5").find("p must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of("fail_copy:op=read,p=1").find("unknown key \"op\""), std::string::npos);
  fault_spec other = parse("fail_copy:p=1");
  other.op = fault_io_op::read;
  EXPECT_NE(validate(other).message().find("op= is for fail_io only"), std::string::npos);
  // Not a copy or channel fault: neither the copy engine's rules nor the channel's decider see it.
  const fault_config c{.seed = 3, .specs = {f}};
  EXPECT_TRUE(copy_fault_plan(c, 1).rules.empty());
  EXPECT_TRUE(faults_at(c, fault_site::channel).empty());
  EXPECT_EQ(faults_at(c, fault_site::tier).specs.size(), 1u);
}

/// Which of `n` jobs of direction `op` the decider fails.
std::vector<bool> tier_failures(tier_fault_decider& d, fault_io_op op, size_t n) {
  std::vector<bool> out;
  for (size_t i = 0; i < n; ++i) out.push_back(d.next(op));
  return out;
}

TEST(TierFaultDeciderTest, TheSameSeedAndRankGiveTheSameFailures) {
  const fault_config c{.seed = 11, .specs = {parse("fail_io:p=0.3")}};
  auto a = tier_fault_decider::make(c, 0);
  auto b = tier_fault_decider::make(c, 0);
  auto other_rank = tier_fault_decider::make(c, 1);
  ASSERT_TRUE(a.ok() && b.ok() && other_rank.ok());
  const auto fa = tier_failures(*a, fault_io_op::read, 200);
  EXPECT_EQ(fa, tier_failures(*b, fault_io_op::read, 200));
  EXPECT_NE(fa, tier_failures(*other_rank, fault_io_op::read, 200));
  const auto fired = static_cast<uint64_t>(std::count(fa.begin(), fa.end(), true));
  EXPECT_EQ(a->fired(), fired);
  EXPECT_GT(fired, 20u);
  EXPECT_LT(fired, 100u);
}

TEST(TierFaultDeciderTest, OpRankNthAndMaxScopeTheFailures) {
  const fault_config c{.seed = 2,
                       .specs = {parse("fail_io:rank=1,op=write,nth=1"),
                                 parse("fail_io:op=read,p=1,max=2")}};
  auto r1 = tier_fault_decider::make(c, 1);
  ASSERT_TRUE(r1.ok());
  // write #0, write #1 (nth=1 fires), read #0, #1 (p=1, max 2), read #2 (max reached).
  EXPECT_FALSE(r1->next(fault_io_op::write));
  EXPECT_TRUE(r1->next(fault_io_op::write));
  EXPECT_TRUE(r1->next(fault_io_op::read));
  EXPECT_TRUE(r1->next(fault_io_op::read));
  EXPECT_FALSE(r1->next(fault_io_op::read));
  EXPECT_FALSE(r1->next(fault_io_op::write));
  EXPECT_EQ(r1->fired(), 3u);
  auto r0 = tier_fault_decider::make(c, 0);  // the write spec is rank 1's
  ASSERT_TRUE(r0.ok());
  EXPECT_FALSE(r0->next(fault_io_op::write));
  EXPECT_FALSE(r0->next(fault_io_op::write));
  EXPECT_TRUE(r0->next(fault_io_op::read));
  EXPECT_EQ(r0->fired(), 1u);
  // Other kinds are no tier faults; an invalid config is refused.
  auto none = tier_fault_decider::make({.seed = 2, .specs = {parse("fail_copy:p=1")}}, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(none->next(fault_io_op::read));
  fault_spec bad = parse("fail_io:p=1");
  bad.probability = 2;
  EXPECT_EQ(tier_fault_decider::make({.specs = {bad}}, 0).error().code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc
