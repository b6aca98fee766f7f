// The simulated model runner of a rank that joined mid-run (a restarted process): it aligns each
// model input with the metadata stream of its worker_connector. Metadata of an earlier step is
// run connector-only and its report reaches the coordinator; a model input whose metadata is of
// a later step is skipped. It checks any token sequence's KV byte for byte (check_tokens).
// In-process facades: memory step transport, manual copy engine.
#include "launch/engines/sim/model_runner.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "cuda/manual_copy_engine.hpp"
#include "launch/config/config_loader.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/engines/sim/kv_content.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::sim {
namespace {

using std::chrono::seconds;

class ModelRunnerAlignmentTest : public shm::testing::ShmTest {
 protected:
  void SetUp() override {
    ShmTest::SetUp();
    const std::vector<std::string> sets{
        "topology.tensor_parallel=1", "kv_cache.layers=2",      "kv_cache.kv_heads=2",
        "kv_cache.head_dim=8",        "kv_cache.gpu_blocks=96", "offload.cpu_bytes_to_use=1MiB",
        "offload.block_size=32"};
    auto loaded = launch::load_config("", "<test>", sets);
    ASSERT_TRUE(loaded.ok());
    auto plan = launch::make_plan(loaded.config, shm::testing::test_instance_prefix() + "runner",
                                  "in-process");
    ASSERT_TRUE(plan.ok()) << plan.error().to_string();
    auto sc_cfg = plan->scheduler;
    sc_cfg.transport = embed::step_transport::memory;
    sc_cfg.listen = false;
    auto sc = embed::scheduler_connector::create(sc_cfg);
    ASSERT_TRUE(sc.ok()) << sc.error().to_string();
    sc_ = std::move(sc).value();
    auto w_cfg = plan->workers[0];
    w_cfg.mode = embed::connection_mode::in_process;
    w_cfg.make_copy_engine = []() -> result<std::unique_ptr<cuda::copy_engine>> {
      return std::unique_ptr<cuda::copy_engine>{new cuda::manual_copy_engine()};
    };
    auto wc = embed::worker_connector::create(w_cfg, sc_.get());
    ASSERT_TRUE(wc.ok()) << wc.error().to_string();
    wc_ = std::move(wc).value();
    const runner_geometry g{.layers = plan->kv.layers_per_rank,
                            .page_bytes = plan->kv.page_bytes,
                            .gpu_blocks = loaded.config.kv_cache.gpu_blocks,
                            .gpu_block_size = loaded.config.kv_cache.gpu_block_size,
                            .finish_transfers = true};
    auto runner = model_runner::create(wc_->copy_engine(), wc_.get(), 0, g);
    ASSERT_TRUE(runner.ok()) << runner.error().to_string();
    runner_.emplace(std::move(runner).value());
    block_size_ = g.gpu_block_size;
    ASSERT_TRUE(sc_->wait_for_workers(std::chrono::milliseconds{10000}).ok());
  }

  void TearDown() override {
    runner_.reset();
    wc_.reset();
    sc_.reset();
    ShmTest::TearDown();
  }

  /// The metadata of an empty step `step`, sent to the rank.
  void plan_step(step_id step) {
    auto meta = sc_->build_connector_meta(scheduler::step_input{step, {}, {}, {}});
    ASSERT_TRUE(meta.ok()) << meta.error().to_string();
  }

  /// One token of a new request written into GPU block 1, slot 0.
  static model_input input_of(step_id step) {
    model_input in;
    in.step = step;
    in.writes.push_back({1, 0, 42});
    return in;
  }

  std::unique_ptr<embed::scheduler_connector> sc_;
  std::unique_ptr<embed::worker_connector> wc_;
  std::optional<model_runner> runner_;
  uint32_t block_size_ = 0;
};

TEST_F(ModelRunnerAlignmentTest, MetadataWhoseModelInputWasMissedRunsConnectorOnlyAndIsReported) {
  plan_step(1);
  plan_step(2);  // the rank missed step 1's model input
  ASSERT_TRUE(runner_->run_step(input_of(2), seconds{10}).ok());
  EXPECT_EQ(runner_->stats().steps_connector_only, 1u);
  EXPECT_EQ(runner_->stats().steps, 1u);  // only step 2's forward ran
  EXPECT_EQ(runner_->stats().tokens_written, 1u);
  EXPECT_EQ(runner_->stats().steps_skipped, 0u);
  EXPECT_EQ(runner_->stats().step_errors, 0u);
  // Both steps were reported: the coordinator releases step 2's output.
  auto up = sc_->update_connector_output(2, seconds{10});
  ASSERT_TRUE(up.ok()) << up.error().to_string();
  EXPECT_EQ(up->through_step, 2u);
  EXPECT_EQ(wc_->metadata(), nullptr);
}

TEST_F(ModelRunnerAlignmentTest, AModelInputPlannedBeforeTheRankRegisteredIsSkipped) {
  plan_step(1);
  ASSERT_TRUE(runner_->run_step(input_of(1), seconds{10}).ok());
  EXPECT_TRUE(runner_->last_step().bound);
  plan_step(3);  // step 2's metadata never reached this rank
  ASSERT_TRUE(runner_->run_step(input_of(2), seconds{10}).ok());
  EXPECT_FALSE(runner_->last_step().bound);
  EXPECT_EQ(runner_->stats().steps_skipped, 1u);
  EXPECT_EQ(runner_->stats().steps, 1u);
  EXPECT_EQ(runner_->stats().tokens_written, 1u);  // step 2's forward did not run
  ASSERT_TRUE(runner_->run_step(input_of(3), seconds{10}).ok());
  EXPECT_EQ(runner_->stats().steps, 2u);
  EXPECT_EQ(runner_->stats().steps_connector_only, 0u);
  EXPECT_EQ(runner_->stats().step_errors, 0u);
  auto up = sc_->update_connector_output(3, seconds{10});
  ASSERT_TRUE(up.ok()) << up.error().to_string();
  EXPECT_EQ(up->through_step, 3u);
}

// check_tokens finds the KV the forward wrote, names each layer of a block that holds another
// token's KV, and checks no token past the last block given.
TEST_F(ModelRunnerAlignmentTest, CheckTokensFindsTheForwardsKvAndNamesABlockThatDiffers) {
  const uint32_t bs = block_size_;
  std::vector<uint32_t> tokens(bs + 2);
  model_input in{.step = 1};
  uint64_t h = 0;
  for (uint32_t p = 0; p < tokens.size(); ++p) {
    tokens[p] = 100 + p;
    h = chain(h, tokens[p]);
    in.writes.push_back({1 + p / bs, p % bs, h});
  }
  plan_step(1);
  ASSERT_TRUE(runner_->run_step(in, seconds{10}).ok());
  const std::vector<gpu_block> blocks{1, 2};
  using lines = std::vector<std::string>;
  EXPECT_EQ(runner_->check_tokens("q", tokens, bs + 2, blocks), lines{});
  EXPECT_EQ(runner_->stats().tokens_checked, (bs + 2) * 2u);  // two layers, one plane
  plan_step(2);
  ASSERT_TRUE(runner_->run_step(input_of(2), seconds{10}).ok());  // another KV in block 1 slot 0
  EXPECT_EQ(runner_->check_tokens("q", tokens, bs + 2, blocks),
            (lines{"rank 0: request q: GPU block 1 layer 0 differs from its tokens' KV",
                   "rank 0: request q: GPU block 1 layer 1 differs from its tokens' KV"}));
  EXPECT_EQ(runner_->check_tokens("q", tokens, bs + 2, {}), lines{});
  EXPECT_EQ(runner_->stats().tokens_checked, (bs + 2) * 4u);
}

}  // namespace
}  // namespace kvc::sim
