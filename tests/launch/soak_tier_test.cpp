// The simulated engine with a file tier (offload.secondary_tiers) in one process: a CPU pool
// far smaller than the workload's documents, a tier directory under /tmp. Every load is verified
// byte for byte, the tier saves prefill tokens beyond the pool alone (the same seed, the same
// workload), its counters reach the summary, and the same seed gives the same counts.
#include "launch/sim_engine/in_process_run.hpp"

#include <gtest/gtest.h>

#include "launch/config_loader.hpp"
#include "launch/sim_engine/run_comparison.hpp"
#include "tests/disk/scratch_dirs.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::sim {
namespace {

class SoakTierTest : public shm::testing::ShmTest {
 protected:
  /// 16 slots per rank for 6 documents of up to 16 offloaded blocks each; a tier of 512 blocks
  /// in a fresh directory (`dir`).
  in_process_options options(const std::string& dir) {
    const std::vector<std::string> sets{"kv_cache.layers=2",
                                        "kv_cache.kv_heads=2",
                                        "kv_cache.head_dim=8",
                                        "kv_cache.gpu_blocks=96",
                                        "offload.cpu_bytes_to_use=64KiB",
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
                                        "workload.seed=5"};
    auto loaded = launch::load_config("", "<test>", sets);
    EXPECT_TRUE(loaded.ok());
    in_process_options o;
    o.config = loaded.config;
    o.config.offload.secondary_tiers.push_back(
        {.root_dir = dir, .capacity_bytes = 4ull << 20, .n_read_threads = 2, .n_write_threads = 2});
    o.instance = shm::testing::test_instance_prefix() + "soaktier" + std::to_string(runs_++);
    return o;
  }
  int runs_ = 0;
};

TEST_F(SoakTierTest, TheFileTierSavesPrefillBeyondThePoolAloneAndEveryLoadIsVerified) {
  disk::testing::scratch_dir dir{"/tmp"};
  ASSERT_FALSE(dir.path().empty());
  const auto opts = options(dir.path());
  auto tier = run_in_process(opts);
  ASSERT_TRUE(tier.ok()) << tier.error().to_string();
  EXPECT_TRUE(tier->ok()) << summary_json(*tier).dump();
  EXPECT_EQ(tier->load_mismatches, 0u);
  EXPECT_GT(tier->loads_verified, 0u);
  EXPECT_EQ(tier->jobs_failed, 0u);
  ASSERT_TRUE(tier->file_tier.has_value());
  const tier_figures& t = *tier->file_tier;
  EXPECT_GT(t.cascaded_blocks, 0u);
  EXPECT_GT(t.promoted_blocks, 0u);
  EXPECT_EQ(t.promotions_failed, 0u);
  EXPECT_EQ(t.cascades_failed, 0u);
  EXPECT_GT(t.bytes_read, 0u);
  // The transfers' bytes are the GPU's alone: 1 KiB per GPU block and rank, every loaded block
  // verified (the tier's reads and writes are its own figures).
  EXPECT_EQ(tier->bytes_loaded, tier->loads_verified * 1024);
  const auto summary = summary_json(*tier);
  ASSERT_TRUE(summary.contains("file_tier"));
  EXPECT_EQ(summary["file_tier"]["promoted_blocks"], t.promoted_blocks);

  auto pool_only = run_without_tier(opts);
  ASSERT_TRUE(pool_only.ok()) << pool_only.error().to_string();
  EXPECT_TRUE(pool_only->ok());
  EXPECT_FALSE(pool_only->file_tier.has_value());
  EXPECT_FALSE(summary_json(*pool_only).contains("file_tier"));
  const auto cmp = compare_tier_json(*tier, *pool_only);
  EXPECT_GT(cmp["requests_compared"].get<uint64_t>(), 0u);
  EXPECT_GT(cmp["prefill_tokens_saved_by_tier"].get<int64_t>(), 0) << cmp.dump();
}

TEST_F(SoakTierTest, TheSameSeedGivesTheSameCountsWithATier) {
  disk::testing::scratch_dir first{"/tmp"};
  disk::testing::scratch_dir second{"/tmp"};
  auto a = run_in_process(options(first.path()));
  auto b = run_in_process(options(second.path()));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(counts_json(*a), counts_json(*b));
}

}  // namespace
}  // namespace kvc::sim
