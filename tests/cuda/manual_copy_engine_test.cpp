// manual-specific behaviour: nothing completes until advanced or waited for, completion is FIFO
// per direction, bytes are copied at completion, and advance / pending count what they did.
#include "cuda/manual_copy_engine.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "tests/cuda/one_buffer_fixture.hpp"

#include "cuda/engine_factory.hpp"

namespace kvc::cuda {
namespace {

class ManualCopyEngineTest : public testing::one_buffer_test<manual_copy_engine> {
 protected:
  std::vector<transfer_id> finished_ids() {
    std::vector<transfer_id> ids;
    for (const transfer_report& r : engine_.take_finished()) ids.push_back(r.id);
    return ids;
  }
};

TEST_F(ManualCopyEngineTest, NothingCompletesUntilAdvanced) {
  const transfer_id store = submit(direction::gpu_to_cpu, 0, 256);
  const transfer_id load = submit(direction::cpu_to_gpu, 1024, 256);
  for (int k = 0; k < 3; ++k) {  // polling and taking reports never move a transfer on
    EXPECT_EQ(engine_.poll(store), poll_state::pending);
    EXPECT_EQ(engine_.poll(load), poll_state::pending);
    EXPECT_TRUE(engine_.take_finished().empty());
  }
  EXPECT_EQ(engine_.pending(direction::gpu_to_cpu), 1u);
  EXPECT_EQ(engine_.pending(direction::cpu_to_gpu), 1u);
  EXPECT_EQ(engine_.advance(direction::cpu_to_gpu), 1u);
  EXPECT_EQ(engine_.poll(load), poll_state::done);
  EXPECT_EQ(engine_.poll(store), poll_state::pending) << "advancing loads moved a store";
  EXPECT_EQ(finished_ids(), std::vector<transfer_id>{load});
  EXPECT_EQ(engine_.advance_all(), 1u);
  EXPECT_EQ(engine_.poll(store), poll_state::done);
}

TEST_F(ManualCopyEngineTest, CompletesFifoPerDirection) {
  std::vector<transfer_id> stores, loads;
  for (size_t k = 0; k < 4; ++k) {
    stores.push_back(submit(direction::gpu_to_cpu, k * 256, 256));
    loads.push_back(submit(direction::cpu_to_gpu, 2048 + k * 256, 256));
  }
  EXPECT_EQ(engine_.advance(direction::gpu_to_cpu, 2), 2u);
  EXPECT_EQ(finished_ids(), (std::vector<transfer_id>{stores[0], stores[1]}));
  EXPECT_EQ(engine_.poll(stores[2]), poll_state::pending);
  EXPECT_EQ(engine_.pending(direction::cpu_to_gpu), 4u);
  EXPECT_EQ(engine_.advance(direction::cpu_to_gpu, 3), 3u);
  EXPECT_EQ(engine_.advance(direction::gpu_to_cpu, 2), 2u);
  EXPECT_EQ(engine_.advance(direction::cpu_to_gpu, 1), 1u);
  EXPECT_EQ(finished_ids(), (std::vector<transfer_id>{loads[0], loads[1], loads[2], stores[2],
                                                      stores[3], loads[3]}));
}

TEST_F(ManualCopyEngineTest, BytesAreCopiedAtCompletionNotAtSubmit) {
  std::vector<std::byte> first(64, std::byte{0x5A});
  ASSERT_TRUE(engine_.upload(gpu_, first.data(), first.size()).ok());
  const transfer_id store = submit(direction::gpu_to_cpu, 0, 64);
  EXPECT_EQ(host_[0], std::byte{0x11}) << "submit copied bytes";
  // The source changes after submit: a DMA reads it when it runs, so the new bytes arrive.
  std::vector<std::byte> second(64, std::byte{0xA5});
  ASSERT_TRUE(engine_.upload(gpu_, second.data(), second.size()).ok());
  EXPECT_EQ(host_[63], std::byte{0x11});
  ASSERT_EQ(engine_.advance(direction::gpu_to_cpu), 1u);
  EXPECT_EQ(engine_.poll(store), poll_state::done);
  EXPECT_EQ(host_[0], std::byte{0xA5});
  EXPECT_EQ(host_[63], std::byte{0xA5});
  EXPECT_EQ(host_[64], std::byte{0x11}) << "copied past the op";
}

TEST_F(ManualCopyEngineTest, WaitCompletesTheTransferAndThoseBeforeItOnly) {
  const transfer_id s0 = submit(direction::gpu_to_cpu, 0, 128);
  const transfer_id s1 = submit(direction::gpu_to_cpu, 128, 128);
  const transfer_id s2 = submit(direction::gpu_to_cpu, 256, 128);
  const transfer_id l0 = submit(direction::cpu_to_gpu, 1024, 128);
  ASSERT_TRUE(engine_.wait(std::span(&s1, 1)).ok());
  EXPECT_EQ(engine_.poll(s0), poll_state::done) << "FIFO: s0 was queued before s1";
  EXPECT_EQ(engine_.poll(s1), poll_state::done);
  EXPECT_EQ(engine_.poll(s2), poll_state::pending);
  EXPECT_EQ(engine_.poll(l0), poll_state::pending) << "the other direction is independent";
  EXPECT_EQ(host_[200], std::byte{0xCD}) << "s1's bytes arrived";
  EXPECT_EQ(host_[300], std::byte{0x11}) << "s2's bytes arrived before it completed";
  EXPECT_EQ(engine_.pending(direction::gpu_to_cpu), 1u);
  // Waiting again on finished transfers is a no-op; unknown ids are reported after the rest.
  const std::vector<transfer_id> again{s0, l0, 4242};
  EXPECT_EQ(engine_.wait(again).code(), errc::not_found);
  EXPECT_EQ(engine_.poll(l0), poll_state::done);
  EXPECT_EQ(finished_ids(), (std::vector<transfer_id>{s0, s1, l0}));
}

TEST_F(ManualCopyEngineTest, AdvanceCountsOnlyWhatWasQueued) {
  EXPECT_EQ(engine_.advance(direction::gpu_to_cpu), 0u);
  EXPECT_EQ(engine_.advance_all(), 0u);
  submit(direction::gpu_to_cpu, 0, 64);
  submit(direction::gpu_to_cpu, 64, 64);
  submit(direction::cpu_to_gpu, 1024, 64);
  EXPECT_EQ(engine_.advance(direction::gpu_to_cpu, 5), 2u);
  EXPECT_EQ(engine_.advance(direction::gpu_to_cpu, 5), 0u);
  EXPECT_EQ(engine_.advance(direction::cpu_to_gpu, 0), 0u);
  EXPECT_EQ(engine_.pending(direction::cpu_to_gpu), 1u);
  EXPECT_EQ(engine_.advance_all(), 1u);
  EXPECT_EQ(engine_.pending(direction::cpu_to_gpu), 0u);
  EXPECT_EQ(engine_.take_finished().size(), 3u);
}

TEST_F(ManualCopyEngineTest, RefusedSubmitQueuesNothing) {
  copy_op into_device{gpu_, gpu_ + 1024, 64};  // CPU side points into device memory
  EXPECT_EQ(engine_.submit(direction::gpu_to_cpu, std::span(&into_device, 1)).code(),
            errc::invalid_argument);
  EXPECT_EQ(engine_.pending(direction::gpu_to_cpu), 0u);
  EXPECT_EQ(engine_.advance_all(), 0u);
}

TEST(ManualCopyEngineFactoryTest, BuiltEverywhereAndNamed) {
  auto e = make_copy_engine({.backend = "manual"});
  ASSERT_TRUE(e.ok()) << e.error().to_string();
  EXPECT_EQ((*e)->name(), "manual");
}

}  // namespace
}  // namespace kvc::cuda
