// Property tests of the coordinator's pure core (step_coordinator over completion_aggregator):
// thousands of seeded random runs of TP×PP worlds up to 8 ranks, with reports that are
// duplicated, dropped, delayed and reordered, ranks that fail jobs or stay silent, ranks that
// are lost and restart, and deadlines by time and by steps. An oracle that knows what was
// delivered checks every released result when it appears:
//   * exactly once: no job gets a second result, and at the end every job has one;
//   * never early: an ok result only after every rank's ok of its live incarnation arrived,
//     before the job's deadlines and with no failure among them;
//   * failure has a cause: a failed report, a deadline, or a rank lost or restarted while the
//     job waited on it;
//   * nothing pending at the end: no tracked job, no undelivered result.
// Deterministic: the seed drives everything; a failing seed is printed.
#include "actors/coordinator/step_coordinator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace kvc::coordinator {
namespace {

constexpr uint64_t job_timeout = 20;  // time units (the coordinator's nanoseconds)
constexpr uint64_t job_timeout_steps = 6;
constexpr uint64_t grace = 50;

struct job_truth {
  step_id step = 0;
  uint64_t deadline = 0;
  step_id step_deadline = 0;
  std::set<rank_id> ok_from;  ///< ranks whose valid ok arrived
  bool failure_arrived = false;
  bool rank_gone = false;  ///< a rank it waited on was lost or restarted, or was lost at expect
  int results = 0;
};

/// A report on its way: delivered at `due` (a step), unless dropped.
struct in_flight {
  step_id due = 0;
  step_report report;
};

class property_run {
 public:
  explicit property_run(uint64_t seed) : rng_(seed) {
    const uint32_t worlds[] = {1, 2, 4, 8};
    world_ = worlds[pick(4)];
    auto c = step_coordinator::create({.world_size = world_,
                                       .job_timeout = std::chrono::nanoseconds{job_timeout},
                                       .job_timeout_steps = job_timeout_steps,
                                       .straggler_grace = std::chrono::nanoseconds{grace}});
    coord_.emplace(std::move(c).value());
    ranks_.resize(world_);
  }

  /// Runs the random phase, then the quiet end; "" when every invariant held.
  std::string run() {
    const step_id steps = 20 + pick(30);
    for (step_id s = 1; s <= steps && failure_.empty(); ++s) step(s, /*chaos=*/true);
    // The end: every rank back, everything delivered, quiet steps, every deadline past.
    for (rank_id r = 0; r < world_; ++r) {
      if (!ranks_[r].alive) restart(r);
    }
    for (step_id s = steps + 1; s <= steps + job_timeout_steps + 4 && failure_.empty(); ++s) {
      step(s, /*chaos=*/false);
    }
    now_ += job_timeout + grace + 1;
    coord_->tick(now_);
    observe();
    if (!failure_.empty()) return failure_;
    for (const auto& [job, t] : jobs_) {
      if (t.results != 1)
        return "job " + std::to_string(job) + " got " + std::to_string(t.results) +
               " results by the end";
    }
    if (coord_->aggregator().tracked_jobs() != 0) {
      return std::to_string(coord_->aggregator().tracked_jobs()) + " jobs still tracked";
    }
    if (coord_->aggregator().pending_results() != 0) return "results left undelivered";
    const auto& st = coord_->stats();
    if (st.completed + st.failed != jobs_.size()) return "completed + failed != jobs";
    return "";
  }

  uint32_t world() const { return world_; }
  /// Every result in the order it was released, with its output's step.
  std::string trace() const { return trace_.str(); }

 private:
  struct rank_state {
    uint32_t incarnation = 0;
    bool alive = true;
    uint64_t seq = 0;
    std::map<step_id, std::vector<completion_event>> due;  ///< events by the step they report
  };

  uint64_t pick(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  void fail(const std::string& why) {
    if (failure_.empty()) failure_ = why;
  }

  /// The jobs a rank had not answered lose it.
  void mark_gone(rank_id r) {
    for (auto& [job, t] : jobs_) {
      if (t.results == 0 && t.ok_from.count(r) == 0) t.rank_gone = true;
    }
    ranks_[r].due.clear();
  }

  void restart(rank_id r) {
    mark_gone(r);  // the old incarnation's unanswered jobs fail
    ranks_[r].incarnation += 1;
    ranks_[r].alive = true;
    ranks_[r].seq = 0;
    coord_->rank_up(r, ranks_[r].incarnation);
    observe();
  }

  void step(step_id s, bool chaos) {
    now_ += 1 + pick(3);
    coord_->tick(now_);
    observe();
    if (chaos) {
      for (rank_id r = 0; r < world_; ++r) {
        if (ranks_[r].alive && chance(0.01)) {
          ranks_[r].alive = false;
          mark_gone(r);
          coord_->rank_down(r);
          observe();
        } else if (!ranks_[r].alive && chance(0.2)) {
          restart(r);
        } else if (ranks_[r].alive && chance(0.005)) {
          restart(r);  // restarted before anyone noticed it was gone
        }
      }
    }
    // Plan the step's jobs.
    connector_metadata meta;
    meta.step = s;
    const uint64_t n = chaos ? pick(4) : 0;
    for (uint64_t i = 0; i < n; ++i) {
      const job_id job = next_job_++;
      const auto kind = chance(0.5) ? transfer_kind::load : transfer_kind::store;
      (kind == transfer_kind::load ? meta.loads : meta.stores).push_back({.id = job, .kind = kind});
      job_truth t{
          .step = s, .deadline = now_ + job_timeout, .step_deadline = s + job_timeout_steps};
      for (rank_id r = 0; r < world_; ++r) {
        if (!ranks_[r].alive) t.rank_gone = true;
      }
      jobs_[job] = t;
      // Each live rank answers in this step or up to 3 later, fails it, or never answers.
      for (rank_id r = 0; r < world_; ++r) {
        if (!ranks_[r].alive || chance(0.03)) continue;
        completion_event ev{.rank = r,
                            .incarnation = ranks_[r].incarnation,
                            .step = 0,
                            .job = job,
                            .kind = kind,
                            .ok = !chance(0.04),
                            .bytes = 1};
        if (!ev.ok) ev.error = errc::device_error;
        ranks_[r].due[s + pick(4)].push_back(ev);
      }
    }
    planned_ = s;
    coord_->expect(meta, now_);
    observe();
    // Every live rank sends its report of the step; the network perturbs them.
    for (rank_id r = 0; r < world_; ++r) {
      rank_state& rs = ranks_[r];
      if (!rs.alive) continue;
      step_report rep{r, rs.incarnation, s, {}};
      if (auto it = rs.due.find(s); it != rs.due.end()) {
        for (completion_event& ev : it->second) {
          ev.step = s;
          ev.seq = rs.seq++;
          rep.events.push_back(ev);
        }
        rs.due.erase(it);
      }
      if (chaos && chance(0.03)) continue;  // dropped
      step_id due = s;
      if (chaos && chance(0.05)) due += 1 + pick(3);  // delayed
      net_.push_back({due, rep});
      if (chaos && chance(0.03)) net_.push_back({due + pick(2), rep});  // duplicated
    }
    std::vector<step_report> now_due;
    for (auto it = net_.begin(); it != net_.end();) {
      if (it->due <= s) {
        now_due.push_back(std::move(it->report));
        it = net_.erase(it);
      } else {
        ++it;
      }
    }
    if (chaos) std::shuffle(now_due.begin(), now_due.end(), rng_);  // reordered
    for (const step_report& rep : now_due) deliver(rep, s);
  }

  void deliver(const step_report& rep, step_id s) {
    const rank_state& rs = ranks_[rep.rank];
    const bool valid = rs.alive && rep.incarnation == rs.incarnation;
    for (const completion_event& ev : rep.events) {
      auto it = jobs_.find(ev.job);
      if (!valid || it == jobs_.end() || it->second.results != 0) continue;
      job_truth& t = it->second;
      if (!ev.ok) {
        t.failure_arrived = true;
      } else if (now_ < t.deadline && s < t.step_deadline) {
        t.ok_from.insert(ev.rank);
      }
    }
    coord_->report(rep);
    observe();
  }

  /// Takes every released output and checks each result against the oracle.
  void observe() {
    while (auto out = coord_->poll_output()) {
      if (last_stamp_ && out->step <= *last_stamp_) {
        fail("output stamps not increasing: " + std::to_string(out->step));
      }
      last_stamp_ = out->step;
      for (const job_result& r : out->jobs) {
        trace_ << out->step << ':' << r.job << ':' << to_string(r.error) << ' ';
        check(r);
      }
    }
  }

  void check(const job_result& r) {
    auto it = jobs_.find(r.job);
    if (it == jobs_.end()) return fail("result for unknown job " + std::to_string(r.job));
    job_truth& t = it->second;
    const std::string job = "job " + std::to_string(r.job);
    if (++t.results > 1) return fail(job + " completed twice");
    if (r.ok) {
      if (t.ok_from.size() != world_) {
        return fail(job + " ok after " + std::to_string(t.ok_from.size()) + " of " +
                    std::to_string(world_) + " ranks");
      }
      if (t.failure_arrived) return fail(job + " ok although a rank reported a failure");
      if (t.rank_gone) return fail(job + " ok although a rank it waited on was lost");
      return;
    }
    const bool deadline = now_ >= t.deadline || planned_ >= t.step_deadline;
    if (!t.failure_arrived && !deadline && !t.rank_gone) {
      fail(job + " failed (" + std::string(to_string(r.error)) + ") without a cause");
    }
  }

  std::mt19937_64 rng_;
  uint32_t world_ = 1;
  std::optional<step_coordinator> coord_;
  std::vector<rank_state> ranks_;
  std::map<job_id, job_truth> jobs_;
  std::vector<in_flight> net_;
  job_id next_job_ = 1;
  uint64_t now_ = 0;
  step_id planned_ = 0;  ///< the latest step handed to expect()
  std::optional<step_id> last_stamp_;
  std::string failure_;
  std::ostringstream trace_;
};

TEST(CompletionPropertyTest, ThousandsOfRandomRunsKeepEveryInvariant) {
  constexpr uint64_t seeds = 3000;
  std::map<uint32_t, int> worlds;
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    property_run run{seed};
    ++worlds[run.world()];
    const std::string failure = run.run();
    ASSERT_TRUE(failure.empty()) << "seed " << seed << " (world " << run.world()
                                 << "): " << failure;
  }
  for (uint32_t w : {1u, 2u, 4u, 8u}) EXPECT_GT(worlds[w], 500) << "world " << w;
}

TEST(CompletionPropertyTest, TheSameSeedGivesTheSameRun) {
  for (uint64_t seed : {7u, 99u, 2024u}) {
    property_run a{seed};
    property_run b{seed};
    EXPECT_EQ(a.run(), "");
    EXPECT_EQ(b.run(), "");
    EXPECT_FALSE(a.trace().empty());
    EXPECT_EQ(a.trace(), b.trace());
    EXPECT_EQ(a.world(), b.world());
  }
}

}  // namespace
}  // namespace kvc::coordinator
