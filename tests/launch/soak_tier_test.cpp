// The simulated engine with a file tier (offload.secondary_tiers) in one process: a CPU pool
// far smaller than the workload's documents, a tier directory under /tmp. Every load is verified
// byte for byte, the tier saves prefill tokens beyond the pool alone (the same seed, the same
// workload), its counters reach the summary, and the same seed gives the same counts. With
// injected fail_io faults every invariant still holds.
#include "launch/engines/sim/in_process_run.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "launch/config/config_loader.hpp"
#include "launch/engines/sim/run_comparison.hpp"
#include "proto/fault_spec_parser.hpp"
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

/// Files under `dir` (recursively) whose name holds a write's temp suffix (`.kvb.tmp.`).
size_t temp_files_under(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(".kvb.tmp.") != std::string::npos) ++n;
  }
  return n;
}

TEST_F(SoakTierTest, FailIoFaultsAreMissesAndDropsAndEveryInvariantHolds) {
  disk::testing::scratch_dir dir{"/tmp"};
  ASSERT_FALSE(dir.path().empty());
  auto opts = options(dir.path());
  // Rank 0's promotions and checks (read) and cascades (write) fail: a failed job of rank 0 is
  // one failed job, whatever the other ranks did, so failed jobs and injected faults match.
  opts.faults.seed = 17;
  for (const char* text : {"fail_io:rank=0,op=read,p=0.25", "fail_io:rank=0,op=write,p=0.25"}) {
    auto spec = parse_fault_spec(text);
    ASSERT_TRUE(spec.ok()) << spec.error().to_string();
    opts.faults.specs.push_back(*spec);
  }
  auto run = run_in_process(opts);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  // Nothing hung, pending, leaked (pool slots) or completed twice; no protocol error.
  EXPECT_TRUE(run->ok()) << summary_json(*run).dump();
  EXPECT_EQ(run->hung_requests, 0u);
  EXPECT_EQ(run->late_reports_dropped, 0u);  // no job waited past its deadline
  EXPECT_EQ(run->busy_slots, 0u);
  // Every load verified byte for byte: no byte of a failed promotion reached the GPU.
  EXPECT_GT(run->loads_verified, 0u);
  EXPECT_EQ(run->load_mismatches, 0u);
  const uint64_t injected = run->faults_fired[static_cast<size_t>(fault_kind::fail_io)];
  EXPECT_GT(injected, 0u);
  EXPECT_EQ(run->jobs_failed, injected);  // each injected fault failed its job, nothing else did
  ASSERT_TRUE(run->file_tier.has_value());
  const tier_figures& t = *run->file_tier;
  EXPECT_GT(t.promotions_failed, 0u);  // misses: their blocks were recomputed
  EXPECT_GT(t.cascades_failed, 0u);    // dropped blocks
  EXPECT_GT(t.promoted_blocks, t.promotions_failed);  // the tier still served hits
  const launch::fault_outcome outcome = fault_outcome_of(*run, opts.faults.seed);
  EXPECT_TRUE(launch::invariants_ok(outcome));
  EXPECT_NE(launch::fault_report_line(outcome).find("\"fail_io\":" + std::to_string(injected)),
            std::string::npos);
  // No write's temp file is left behind.
  EXPECT_EQ(temp_files_under(dir.path()), 0u);

  // The same seed gives the same faults and the same counts.
  disk::testing::scratch_dir again_dir{"/tmp"};
  auto again_opts = options(again_dir.path());
  again_opts.faults = opts.faults;
  auto again = run_in_process(again_opts);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(counts_json(*again), counts_json(*run));
  EXPECT_EQ(again->faults_fired, run->faults_fired);
}

}  // namespace
}  // namespace kvc::sim
