// The simulated engine's pure parts: the workload generator (seeded, Zipf documents, follow-ups)
// and sim_scheduler (batching under a token budget, prefix caching, preemption, loads through
// the connector calls), driven step by step with a scripted connector.
#include "launch/engines/sim/sim_scheduler.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launch/engines/sim/kv_content.hpp"
#include "launch/engines/sim/workload_generator.hpp"

namespace kvc::sim {
namespace {

using ::testing::ElementsAre;

/// A connector that offers `hit_tokens` of CPU hits for requests whose id starts with "hit" and
/// records the calls.
class scripted_connector final : public connector_calls {
 public:
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed) override {
    ++lookups;
    remote_decode.push_back(req.do_remote_decode);
    if (req.id.starts_with("hit")) return {hit_tokens, hit_tokens > 0};
    return {0u, false};
  }
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> blocks,
                                  uint32_t num_external) override {
    allocated.emplace_back(req.id);
    externals.push_back(num_external);
    return status::success();
  }
  bool request_finished(std::string_view id) override {
    finished.emplace_back(id);
    return delay_free;
  }
  uint32_t hit_tokens = 0;
  bool delay_free = false;
  int lookups = 0;
  std::vector<bool> remote_decode;  ///< each lookup's request_view::do_remote_decode
  std::vector<std::string> allocated;
  std::vector<uint32_t> externals;
  std::vector<std::string> finished;
};

request_spec make(const std::string& id, uint32_t first_token, uint32_t n, uint32_t out) {
  request_spec r;
  r.id = id;
  for (uint32_t i = 0; i < n; ++i) r.prompt.push_back(first_token + i);
  r.max_new_tokens = out;
  return r;
}

engine_limits small() {
  return {.gpu_blocks = 17,
          .gpu_block_size = 4,
          .max_running = 4,
          .max_batched_tokens = 16,
          .prefill_token_us = 10,
          .decode_step_us = 100,
          .load_token_us = 1};
}

/// A connector output in which `id`'s stores finished.
scheduler::request_completions sending(const std::string& id) {
  scheduler::request_completions c;
  c.finished_sending.push_back(id);
  return c;
}

/// A connector output in which `id`'s load finished.
scheduler::request_completions recving(const std::string& id) {
  scheduler::request_completions c;
  c.finished_recving.push_back(id);
  return c;
}

/// Nothing left: no request, every block of small() free, no protocol error.
void expect_drained(const sim_scheduler& s) {
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.pool().num_free(), 16u);
  EXPECT_TRUE(s.errors().empty());
}

/// No block of small() is in the GPU prefix cache.
void expect_nothing_cached(const sim_scheduler& s) {
  for (gpu_block blk = 1; blk < 17; ++blk) EXPECT_FALSE(s.pool().is_cached(blk)) << blk;
}

/// Steps until idle (at most `limit` steps), with no connector output.
int run(sim_scheduler& s, int limit = 200) {
  int n = 0;
  while (!s.idle() && n < limit) {
    s.schedule();
    s.complete({});
    ++n;
  }
  return n;
}

/// Request a (12 tokens) runs to the end, leaving its 3 full blocks cached; then request b
/// (8 tokens, 20 outputs) is prefilled and decodes.
void cache_a_then_decode_b(sim_scheduler& s) {
  ASSERT_TRUE(s.add(make("a", 1, 12, 1)).ok());
  run(s);
  ASSERT_TRUE(s.add(make("b", 100, 8, 20)).ok());
  s.schedule();
  s.complete({});
}

TEST(WorkloadGeneratorTest, TheSeedDecidesEverythingAndPromptsShareDocumentPrefixes) {
  launch::workload_section w;
  w.requests = 50;
  w.arrival_rate = 3;
  w.documents = 3;
  w.prompt_tokens = {40, 80};
  w.shared_prefix_tokens = {20, 30};
  w.seed = 5;
  workload_generator a(w, 1000);
  workload_generator b(w, 1000);
  std::vector<request_spec> all;
  for (uint64_t s = 1; s <= 100 && a.pending_first_turns() > 0; ++s) {
    auto x = a.arrivals(s);
    auto y = b.arrivals(s);
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i].prompt, y[i].prompt);
    all.insert(all.end(), x.begin(), x.end());
  }
  ASSERT_EQ(all.size(), 50u);
  // Every prompt starts with one of the 3 documents' prefixes (each prompt is longer).
  int shared = 0;
  for (const auto& r : all) {
    EXPECT_GE(r.prompt.size(), 40u);
    EXPECT_LE(r.prompt.size(), 80u);
    for (uint32_t d = 0; d < 3; ++d) {
      const auto p = a.document_prefix(d);
      if (std::equal(p.begin(), p.end(), r.prompt.begin())) ++shared;
    }
  }
  EXPECT_EQ(shared, 50);
  // Zipf: the first document is the most popular one.
  EXPECT_EQ(a.document_for(0.0), 0u);
  EXPECT_EQ(a.document_for(0.999999), 2u);
  w.seed = 6;
  workload_generator c(w, 1000);
  EXPECT_NE(c.arrivals(1).size() + c.arrivals(2).size() + c.arrivals(3).size(), 0u);
}

TEST(WorkloadGeneratorTest, AFollowUpExtendsTheConversationOrEndsItWhenItWouldNotFit) {
  launch::workload_section w;
  w.arrival_rate = 0;
  w.requests = 1;
  w.multi_turn = {1.0, 3};
  w.output_tokens = {5, 5};
  workload_generator g(w, 100);
  const std::vector<uint32_t> turn0(60, 7);
  auto next = g.follow_up(4, 0, turn0);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->id, "c4.t1");
  ASSERT_EQ(next->prompt.size(), 65u);  // the conversation, then a 5-token message
  EXPECT_TRUE(std::equal(turn0.begin(), turn0.end(), next->prompt.begin()));
  EXPECT_FALSE(g.follow_up(4, 2, turn0).has_value());  // max_turns reached
  const std::vector<uint32_t> long_turn(95, 7);
  EXPECT_FALSE(g.follow_up(4, 0, long_turn).has_value());  // 95 + 5 + 5 > 100
  EXPECT_EQ(g.truncated_conversations(), 1u);
}

TEST(SimSchedulerTest, PrefillIsChunkedToTheBudgetAndTheClockCountsPrefillAndDecode) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 20, 2)).ok());
  s.schedule();  // 16 of 20 prompt tokens
  ASSERT_EQ(s.input().new_requests.size(), 1u);
  EXPECT_EQ(s.input().new_requests[0].num_scheduled, 16u);
  EXPECT_EQ(s.model().writes.size(), 16u);
  EXPECT_TRUE(s.complete({}).empty());
  s.schedule();  // the last 4 tokens: the first output token is sampled
  ASSERT_EQ(s.input().cached_requests.size(), 1u);
  EXPECT_EQ(s.input().cached_requests[0].num_scheduled, 4u);
  s.complete({});
  EXPECT_EQ(s.stats().clock_us, 200.0);  // 20 prefill tokens of 10 us
  EXPECT_TRUE(s.stats().finished.empty());
  s.schedule();  // one decode step
  auto done = s.complete({});
  EXPECT_EQ(s.stats().clock_us, 300.0);
  // Its first token came at the end of the second step, its last at the end of the third.
  EXPECT_THAT(s.stats().finished, ElementsAre(finished_request{"a", 0, 200, 300, 2, 20}));
  EXPECT_EQ(s.stats().finished[0].ttft_us(), 200.0);
  EXPECT_EQ(s.stats().output_tokens, 2u);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tokens.size(), 22u);
  EXPECT_THAT(conn.finished, ElementsAre("a"));
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.pool().num_free(), 16u);  // every block back
}

TEST(SimSchedulerTest, ASharedPrefixHitsTheGpuPrefixCache) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 12, 1)).ok());
  run(s);
  ASSERT_TRUE(s.add(make("b", 1, 13, 1)).ok());  // a's 12 tokens + 1
  s.schedule();
  ASSERT_EQ(s.input().new_requests.size(), 1u);
  EXPECT_EQ(s.input().new_requests[0].num_computed, 12u);  // 3 cached blocks
  EXPECT_EQ(s.model().writes.size(), 1u);
  s.complete({});
  EXPECT_EQ(s.stats().gpu_hit_tokens, 12u);
}

TEST(SimSchedulerTest, MemoryPressurePreemptsTheLastRunningRequestAndEveryoneFinishes) {
  scripted_connector conn;
  auto l = small();
  l.gpu_blocks = 9;  // 8 usable blocks = 32 tokens
  sim_scheduler s(l, conn);
  ASSERT_TRUE(s.add(make("a", 100, 12, 12)).ok());
  ASSERT_TRUE(s.add(make("b", 200, 12, 12)).ok());
  EXPECT_LT(run(s), 200);
  EXPECT_TRUE(s.idle());
  EXPECT_GT(s.stats().preemptions, 0u);
  EXPECT_EQ(s.stats().requests_finished, 2u);
  EXPECT_TRUE(s.errors().empty());
}

TEST(SimSchedulerTest, ACpuHitLoadsThenPromotesWithTheLoadedTokensAndTheirHashes) {
  scripted_connector conn;
  conn.hit_tokens = 8;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("hit", 1, 10, 1)).ok());
  s.schedule();  // allocation for the 8 loaded tokens; nothing computed yet
  EXPECT_TRUE(s.input().new_requests.empty());
  EXPECT_THAT(conn.externals, ElementsAre(8u));
  ASSERT_EQ(s.model().loads.size(), 1u);
  const auto& check = s.model().loads[0];
  EXPECT_EQ(check.request_id, "hit");
  ASSERT_EQ(check.blocks.size(), 2u);
  ASSERT_EQ(check.hashes.size(), 8u);
  uint64_t h = 0;
  for (uint32_t i = 0; i < 8; ++i) {
    h = chain(h, 1 + i);
    EXPECT_EQ(check.hashes[i], h);
  }
  s.complete(recving("hit"));
  s.schedule();  // promoted: the 2 tokens past the load are computed
  ASSERT_EQ(s.input().new_requests.size(), 1u);
  EXPECT_EQ(s.input().new_requests[0].num_computed, 8u);
  EXPECT_EQ(s.input().new_requests[0].num_scheduled, 2u);
  s.complete({});
  EXPECT_EQ(s.stats().cpu_hit_tokens, 8u);
  EXPECT_TRUE(s.idle());
}

TEST(SimSchedulerTest, AbortingHoldsTheBlocksOfDelayFreeRequestsUntilFinishedSending) {
  scripted_connector conn;
  conn.delay_free = true;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 8, 50)).ok());
  s.schedule();
  s.complete({});
  s.abort_all();
  EXPECT_EQ(s.stats().requests_aborted, 1u);
  EXPECT_FALSE(s.idle());  // its blocks wait for the stores
  s.schedule();
  s.complete(sending("a"));
  expect_drained(s);
}

TEST(SimSchedulerTest, AGpuCacheResetPreemptsTheRunningAndForgetsEveryCachedBlock) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_NO_FATAL_FAILURE(cache_a_then_decode_b(s));
  ASSERT_EQ(s.running(), 1u);  // b decodes
  ASSERT_TRUE(s.lose_gpu_cache().ok());
  EXPECT_EQ(s.running(), 0u);
  EXPECT_EQ(s.pool().num_free(), 16u);  // b's blocks freed
  expect_nothing_cached(s);
  EXPECT_EQ(s.stats().gpu_cache_resets, 1u);
  EXPECT_EQ(s.stats().requests_recomputed, 1u);
  EXPECT_EQ(s.stats().preemptions, 1u);

  // The next step names b as preempted and recomputes it (prompt and its output) from token 0;
  // a second request with a's prefix finds nothing in the GPU cache.
  ASSERT_TRUE(s.add(make("c", 1, 13, 1)).ok());
  s.schedule();
  EXPECT_THAT(s.input().preempted, ElementsAre("b"));
  ASSERT_EQ(s.input().new_requests.size() + s.input().cached_requests.size(), 2u);
  for (const auto* list : {&s.input().new_requests, &s.input().cached_requests}) {
    for (const auto& r : *list) EXPECT_EQ(r.num_computed, 0u) << r.req.id;
  }
  s.complete({});
  EXPECT_EQ(s.stats().gpu_hit_tokens, 0u);
  EXPECT_LT(run(s), 200);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(s.stats().requests_finished, 3u);
  EXPECT_TRUE(s.errors().empty());
}

TEST(SimSchedulerTest, ARequestLoadingThroughAResetKeepsItsBlocksAndRecomputesEveryToken) {
  scripted_connector conn;
  conn.hit_tokens = 8;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("hit", 1, 10, 1)).ok());
  s.schedule();  // the load is planned
  s.complete({});
  ASSERT_TRUE(s.lose_gpu_cache().ok());
  EXPECT_EQ(s.pool().num_free(), 14u);  // its 2 blocks wait for the load to finish
  s.schedule();
  EXPECT_TRUE(s.input().preempted.empty());  // never ran: nothing to flush
  s.complete(recving("hit"));
  s.schedule();  // promoted with nothing of the load: every token computed again
  ASSERT_EQ(s.input().new_requests.size(), 1u);
  EXPECT_EQ(s.input().new_requests[0].num_computed, 0u);
  EXPECT_EQ(s.input().new_requests[0].num_scheduled, 10u);
  s.complete({});
  EXPECT_EQ(s.stats().cpu_hit_tokens, 0u);
  EXPECT_EQ(s.stats().requests_recomputed, 1u);
  EXPECT_TRUE(s.idle());
  EXPECT_TRUE(s.errors().empty());
}

TEST(SimSchedulerTest, AGpuCacheResetIsRefusedInsideAStep) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 8, 4)).ok());
  s.schedule();
  const auto st = s.lose_gpu_cache();
  EXPECT_EQ(st.code(), errc::precondition_failed);
  EXPECT_EQ(s.running(), 1u);
  EXPECT_EQ(s.stats().gpu_cache_resets, 0u);
  s.complete({});
  EXPECT_TRUE(s.lose_gpu_cache().ok());
}

TEST(SimSchedulerTest, ARequestThatCanNeverFitIsRefused) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  EXPECT_EQ(s.add(make("big", 1, 60, 10)).code(), errc::invalid_argument);
  EXPECT_EQ(s.add(make("empty", 1, 0, 1)).code(), errc::invalid_argument);
  ASSERT_TRUE(s.add(make("a", 1, 4, 1)).ok());
  EXPECT_EQ(s.add(make("a", 1, 4, 1)).code(), errc::invalid_argument);
}

TEST(SimSchedulerTest, FindShowsARequestsPhaseTokensBlocksAndComputedTokens) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 8, 3)).ok());
  ASSERT_TRUE(s.add(make("b", 50, 4, 3)).ok());
  auto a = s.find("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->phase, request_phase::waiting);
  EXPECT_THAT(a->tokens, ElementsAre(1, 2, 3, 4, 5, 6, 7, 8));
  EXPECT_TRUE(a->blocks.empty());
  EXPECT_EQ(a->num_computed, 0u);
  EXPECT_FALSE(s.find("nobody").has_value());

  s.schedule();
  s.complete({});
  a = s.find("a");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->phase, request_phase::running);
  ASSERT_EQ(a->tokens.size(), 9u);  // the prompt and its first sampled token
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(a->num_computed, 8u);
  const auto running = s.running_requests();
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].id, "a");
  EXPECT_EQ(running[1].id, "b");
  EXPECT_EQ(running[1].num_computed, 4u);
}

TEST(SimSchedulerTest, AbortingOneRequestReleasesItOrHoldsItsBlocksUntilItsLoadEnds) {
  scripted_connector conn;
  conn.hit_tokens = 8;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("hit", 1, 10, 1)).ok());
  ASSERT_TRUE(s.add(make("a", 100, 8, 50)).ok());
  s.schedule();  // hit's load is planned; a runs
  EXPECT_EQ(s.abort("a").code(), errc::precondition_failed);  // inside the step
  s.complete({});
  ASSERT_EQ(s.find("hit")->phase, request_phase::loading);
  ASSERT_EQ(s.find("a")->phase, request_phase::running);

  ASSERT_TRUE(s.abort("a").ok());
  EXPECT_FALSE(s.find("a").has_value());  // no store in flight: released at once
  EXPECT_EQ(s.running(), 0u);
  ASSERT_TRUE(s.abort("hit").ok());
  const auto hit = s.find("hit");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->phase, request_phase::finished_holding);  // the load still writes its blocks
  EXPECT_EQ(hit->blocks.size(), 2u);
  EXPECT_EQ(s.abort("nobody").code(), errc::not_found);
  EXPECT_EQ(s.stats().requests_aborted, 2u);
  EXPECT_THAT(conn.finished, ElementsAre("a", "hit"));

  s.schedule();
  EXPECT_TRUE(s.input().new_requests.empty() && s.input().cached_requests.empty());
  s.complete(recving("hit"));
  expect_drained(s);
}

TEST(SimSchedulerTest, AnAbortedRequestEntersNeitherTtftNorTheOutputTokens) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_TRUE(s.add(make("a", 1, 4, 2)).ok());
  ASSERT_TRUE(s.add(make("b", 100, 4, 50)).ok());
  for (int i = 0; i < 3; ++i) {  // a finishes in the second step; b samples 3 tokens
    s.schedule();
    s.complete({});
  }
  ASSERT_EQ(s.find("b")->tokens.size(), 7u);
  s.abort_all();
  EXPECT_EQ(s.stats().requests_finished, 1u);
  EXPECT_EQ(s.stats().requests_aborted, 1u);
  // b sampled its first token before a finished, but only a counts.
  ASSERT_EQ(s.stats().finished.size(), 1u);
  EXPECT_EQ(s.stats().finished[0].id, "a");
  EXPECT_EQ(s.stats().output_tokens, 2u);
  EXPECT_EQ(s.stats().decode_tokens, 3u);  // the work done: a's second token, b's 2nd and 3rd
  expect_drained(s);
}

TEST(SimSchedulerTest, WithoutPrefixCachingNoGpuBlockIsEverFound) {
  scripted_connector conn;
  engine_limits limits = small();
  limits.enable_prefix_caching = false;
  sim_scheduler s(limits, conn);
  ASSERT_TRUE(s.add(make("a", 1, 12, 1)).ok());
  run(s);
  expect_nothing_cached(s);
  ASSERT_TRUE(s.add(make("b", 1, 13, 1)).ok());  // a's 12 tokens and one more
  s.schedule();
  ASSERT_EQ(s.input().new_requests.size(), 1u);
  EXPECT_EQ(s.input().new_requests[0].num_computed, 0u);
  s.complete({});
  EXPECT_EQ(s.stats().gpu_hit_tokens, 0u);
}

TEST(SimSchedulerTest, ResetPrefixCacheForgetsTheHashesAndKeepsTheRunningBlocks) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  ASSERT_NO_FATAL_FAILURE(cache_a_then_decode_b(s));
  const std::vector<gpu_block> held(s.find("b")->blocks.begin(), s.find("b")->blocks.end());
  s.reset_prefix_cache();
  expect_nothing_cached(s);
  EXPECT_EQ(s.running(), 1u);
  EXPECT_THAT(s.find("b")->blocks, ::testing::ElementsAreArray(held));
  EXPECT_EQ(s.stats().preemptions, 0u);
}

TEST(SimSchedulerTest, DoRemoteDecodeReachesTheConnectorsView) {
  scripted_connector conn;
  sim_scheduler s(small(), conn);
  request_spec pd = make("pd", 1, 8, 1);
  pd.do_remote_decode = true;
  ASSERT_TRUE(s.add(pd).ok());
  ASSERT_TRUE(s.add(make("plain", 50, 8, 1)).ok());
  s.schedule();
  EXPECT_THAT(conn.remote_decode, ElementsAre(true, false));
  ASSERT_EQ(s.input().new_requests.size(), 2u);
  EXPECT_TRUE(s.input().new_requests[0].req.do_remote_decode);
  EXPECT_FALSE(s.input().new_requests[1].req.do_remote_decode);
  s.complete({});
}

}  // namespace
}  // namespace kvc::sim
