// The simulated engine with every rank in one process (launch/engines/sim/in_process_run.hpp):
// a short soak of a fixed seed over the embedding API on the deterministic manual copy engine
// and the memory step transport, and its checks: requests finish, the CPU pool serves hits,
// every load is verified byte for byte without a mismatch, nothing hangs or stays pending at the
// end, and the same seed gives the same report.
#include "launch/engines/sim/in_process_run.hpp"

#include <gtest/gtest.h>

#include <set>

#include "launch/config/config_loader.hpp"
#include "launch/engines/sim/run_comparison.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::sim {
namespace {

class SoakTest : public shm::testing::ShmTest {
 protected:
  /// A small geometry whose GPU cache is much smaller than the working set: offloading pays.
  in_process_options options(uint64_t seed, std::vector<std::string> more = {}) {
    std::vector<std::string> sets{"kv_cache.layers=2",
                                        "kv_cache.kv_heads=2",
                                        "kv_cache.head_dim=8",
                                        "kv_cache.gpu_blocks=96",
                                        "offload.cpu_bytes_to_use=1MiB",
                                        "offload.block_size=32",
                                        "workload.requests=60",
                                        "workload.arrival_rate=1.5",
                                        "workload.prompt_tokens.min=64",
                                        "workload.prompt_tokens.max=640",
                                        "workload.shared_prefix_tokens.min=64",
                                        "workload.shared_prefix_tokens.max=512",
                                        "workload.documents=6",
                                        "workload.output_tokens.min=4",
                                        "workload.output_tokens.max=64",
                                        "workload.multi_turn.probability=0.5",
                                        "workload.multi_turn.max_turns=3",
                                        "workload.max_running=8",
                                        "workload.max_batched_tokens=512",
                                        "workload.steps=300",
                                        "workload.seed=" + std::to_string(seed)};
    sets.insert(sets.end(), more.begin(), more.end());
    return with(sets);
  }
  /// The config of `sets` over the defaults.
  in_process_options with(const std::vector<std::string>& sets) {
    auto loaded = launch::load_config("", "<test>", sets);
    EXPECT_TRUE(loaded.ok());
    in_process_options o;
    o.config = loaded.config;
    o.instance = shm::testing::test_instance_prefix() + "soak" + std::to_string(runs_++);
    return o;
  }
  int runs_ = 0;
};

/// The run ended well: requests finished, the CPU pool served hits, every load was verified.
void expect_verified_cpu_hits(const run_report& r) {
  EXPECT_TRUE(r.ok()) << summary_json(r).dump();
  EXPECT_GT(r.requests_finished, 0u);
  EXPECT_GT(r.cpu_hit_tokens, 0u);
  EXPECT_GT(r.loads_verified, 0u);
  EXPECT_EQ(r.load_mismatches, 0u);
}

TEST_F(SoakTest, ShortSoakFinishesRequestsVerifiesEveryLoadAndLeavesNothing) {
  auto rep = run_in_process(options(7));
  ASSERT_TRUE(rep.ok()) << rep.error().to_string();
  expect_verified_cpu_hits(*rep);
  EXPECT_GT(rep->blocks_stored, 0u);
  EXPECT_GT(rep->blocks_loaded, 0u);
  EXPECT_EQ(rep->jobs_failed, 0u);
  EXPECT_EQ(rep->step_errors, 0u);
  EXPECT_EQ(rep->hung_requests, 0u);
  EXPECT_EQ(rep->pending_jobs, 0u);  // no slot pinned by a load or pending for a store
  EXPECT_EQ(rep->rank_jobs_known, 0u);
  EXPECT_TRUE(rep->problems.empty()) << summary_json(*rep).dump();
  // Every GPU block loaded is checked on each of the 2 ranks, where it has 1 KiB (2 layers x
  // 1 KV head x 8 dims x 16 tokens x K and V x 2 bytes): the loads' bytes over both ranks. (An
  // offloaded block is 2 GPU blocks; a load after a GPU prefix-cache hit may move only one.)
  EXPECT_EQ(rep->bytes_loaded, rep->loads_verified * 1024) << summary_json(*rep).dump();
}

TEST_F(SoakTest, TheDefaultWorkloadFinishesEveryRequestThatArrived) {
  // What `kvconnect launch` and `kvconnect soak` run without a file: the drain lets every
  // request that arrived in the 200 steps finish.
  auto rep = run_in_process(with({}));
  ASSERT_TRUE(rep.ok()) << rep.error().to_string();
  expect_verified_cpu_hits(*rep);
  EXPECT_EQ(rep->requests_arrived, 110u);
  EXPECT_EQ(rep->requests_finished, 110u);
  EXPECT_EQ(rep->requests_aborted, 0u);
  EXPECT_EQ(rep->steps, 485u);  // 200 with arrivals, 285 of the drain
  EXPECT_EQ(rep->finished.size(), rep->requests_finished);
}

TEST_F(SoakTest, ACompareCountsOnlyTheRequestsFinishedInBothRuns) {
  // A short drain: each run aborts requests, not the same ones.
  auto on_opts = options(3, {"workload.drain_steps=5"});
  auto on = run_in_process(on_opts);
  on_opts.offload = false;
  auto off = run_in_process(on_opts);
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_GT(on->requests_aborted, 0u);
  EXPECT_GT(off->requests_aborted, 0u);
  std::set<std::string> in_off;
  for (const auto& f : off->finished) in_off.insert(f.id);
  uint64_t both = 0;
  int64_t prefill_on = 0;
  int64_t prefill_off = 0;
  for (const auto& f : on->finished) {
    if (!in_off.contains(f.id)) continue;
    ++both;
    prefill_on += static_cast<int64_t>(f.prefill_tokens);
  }
  std::set<std::string> in_on;
  for (const auto& f : on->finished) in_on.insert(f.id);
  for (const auto& f : off->finished) {
    if (in_on.contains(f.id)) prefill_off += static_cast<int64_t>(f.prefill_tokens);
  }
  EXPECT_EQ(on->requests_finished, 37u);
  EXPECT_EQ(off->requests_finished, 37u);
  EXPECT_EQ(both, 35u);  // each run finished 2 the other aborted
  const auto cmp = compare_json(*on, *off);
  EXPECT_EQ(cmp.at("requests_compared").get<uint64_t>(), both);
  EXPECT_EQ(cmp.at("prefill_tokens_saved").get<int64_t>(), prefill_off - prefill_on);
  EXPECT_GT(prefill_off - prefill_on, 0);
  // The same requests: the same output tokens on both sides.
  EXPECT_EQ(cmp.at("compared_on").at("output_tokens"), cmp.at("compared_off").at("output_tokens"));
  EXPECT_LT(cmp.at("compared_on").at("output_tokens").get<uint64_t>(), on->output_tokens);
}

TEST_F(SoakTest, WithoutPrefixCachingEveryHitComesFromTheCpuPoolVerified) {
  auto on = run_in_process(options(7));
  ASSERT_TRUE(on.ok()) << on.error().to_string();
  EXPECT_GT(on->gpu_hit_tokens, 0u);
  in_process_options o = options(7);
  o.config.kv_cache.enable_prefix_caching = false;
  auto off = run_in_process(o);
  ASSERT_TRUE(off.ok()) << off.error().to_string();
  expect_verified_cpu_hits(*off);
  EXPECT_EQ(off->gpu_hit_tokens, 0u);
}

TEST_F(SoakTest, TheSameSeedGivesTheSameReport) {
  auto a = run_in_process(options(11));
  auto b = run_in_process(options(11));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(counts_json(*a), counts_json(*b));
  EXPECT_EQ(a->finished, b->finished);  // the same requests finished at the same times
  auto c = run_in_process(options(12));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(counts_json(*a), counts_json(*c));  // the seed matters
}

TEST_F(SoakTest, OffloadingSavesPrefillAgainstTheSameWorkloadWithout) {
  auto on_opts = options(3);
  auto on = run_in_process(on_opts);
  on_opts.offload = false;
  auto off = run_in_process(on_opts);
  ASSERT_TRUE(on.ok() && off.ok());
  EXPECT_TRUE(off->ok());
  EXPECT_EQ(off->cpu_hit_tokens, 0u);
  EXPECT_EQ(off->loads_verified, 0u);
  EXPECT_LT(on->prefill_tokens_computed, off->prefill_tokens_computed);
  EXPECT_LT(on->sim_seconds, off->sim_seconds);
}

}  // namespace
}  // namespace kvc::sim
