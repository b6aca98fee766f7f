// sim-specific behaviour: pending observed through the pause gate, direction overlap, and the
// device-range checks that make the sim a strict test bed for op builders.
#include "cuda/sim_copy_engine.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/cuda/one_buffer_fixture.hpp"

namespace kvc::cuda {
namespace {

using SimCopyEngineTest = testing::one_buffer_test<sim_copy_engine>;

TEST_F(SimCopyEngineTest, PendingWhilePausedThenDoneAfterResume) {
  engine_.pause(direction::gpu_to_cpu);
  const transfer_id id = submit(direction::gpu_to_cpu, 0, 512);
  EXPECT_EQ(engine_.poll(id), poll_state::pending);
  EXPECT_TRUE(engine_.take_finished().empty());
  EXPECT_EQ(host_[0], std::byte{0x11}) << "nothing may be copied before resume";
  status blocked = engine_.wait(std::span(&id, 1));
  EXPECT_EQ(blocked.code(), errc::precondition_failed) << "wait would block forever";
  engine_.resume(direction::gpu_to_cpu);
  ASSERT_TRUE(engine_.wait(std::span(&id, 1)).ok());
  EXPECT_EQ(engine_.poll(id), poll_state::done);
  EXPECT_EQ(host_[0], std::byte{0xCD}) << "fresh device memory reads as 0xCD";
}

TEST_F(SimCopyEngineTest, LoadsOverlapPausedStores) {
  engine_.pause(direction::gpu_to_cpu);
  const transfer_id store = submit(direction::gpu_to_cpu, 0, 256);
  const transfer_id load = submit(direction::cpu_to_gpu, 1024, 256);
  ASSERT_TRUE(engine_.wait(std::span(&load, 1)).ok());
  EXPECT_EQ(engine_.poll(store), poll_state::pending);
  auto reports = engine_.take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].id, load);
  EXPECT_EQ(reports[0].dir, direction::cpu_to_gpu);
  engine_.resume(direction::gpu_to_cpu);
  ASSERT_TRUE(engine_.wait(std::span(&store, 1)).ok());
  EXPECT_EQ(engine_.take_finished().size(), 1u);
}

TEST_F(SimCopyEngineTest, QueuedTransfersFinishInOrderAfterResume) {
  engine_.pause(direction::cpu_to_gpu);
  std::vector<transfer_id> ids;
  for (size_t k = 0; k < 5; ++k) ids.push_back(submit(direction::cpu_to_gpu, k * 256, 256));
  for (transfer_id id : ids) EXPECT_EQ(engine_.poll(id), poll_state::pending);
  engine_.resume(direction::cpu_to_gpu);
  ASSERT_TRUE(engine_.wait(std::span(&ids.back(), 1)).ok());
  auto reports = engine_.take_finished();
  ASSERT_EQ(reports.size(), ids.size());
  for (size_t k = 0; k < ids.size(); ++k) EXPECT_EQ(reports[k].id, ids[k]);
}

TEST_F(SimCopyEngineTest, RefusesOpsOutsideDeviceMemoryOrIntoIt) {
  std::vector<std::byte> other(256);
  copy_op not_device{other.data(), host_.data(), 64};    // "GPU" side is host memory
  copy_op past_end{gpu_ + 4096 - 32, host_.data(), 64};  // runs off the buffer
  copy_op cpu_in_device{gpu_, gpu_ + 1024, 64};          // CPU side is device memory
  for (const copy_op& op : {not_device, past_end, cpu_in_device}) {
    auto id = engine_.submit(direction::gpu_to_cpu, std::span(&op, 1));
    EXPECT_EQ(id.code(), errc::invalid_argument);
  }
  copy_op swapped{host_.data(), gpu_, 64};  // a load submitted as a store
  EXPECT_EQ(engine_.submit(direction::gpu_to_cpu, std::span(&swapped, 1)).code(),
            errc::invalid_argument);
  EXPECT_EQ(engine_.upload(gpu_ + 4000, host_.data(), 200).code(), errc::invalid_argument);
  EXPECT_EQ(engine_.download(host_.data(), other.data(), 16).code(), errc::invalid_argument);
}

TEST_F(SimCopyEngineTest, RegisterHostRejectsOverlapAndEmpty) {
  ASSERT_TRUE(engine_.register_host(host_.data(), 2048).ok());
  EXPECT_EQ(engine_.register_host(host_.data() + 1024, 2048).code(), errc::invalid_argument);
  EXPECT_EQ(engine_.register_host(host_.data(), 0).code(), errc::invalid_argument);
  EXPECT_TRUE(engine_.register_host(host_.data() + 2048, 2048).ok());
}

TEST(SimCopyEngineLifetimeTest, DestructorDropsWorkQueuedBehindAPause) {
  std::vector<std::byte> host(256, std::byte{0x22});
  {
    sim_copy_engine engine;
    auto buf = engine.allocate_device(256);
    ASSERT_TRUE(buf.ok());
    engine.pause(direction::gpu_to_cpu);
    copy_op op{buf->data, host.data(), 256};
    ASSERT_TRUE(engine.submit(direction::gpu_to_cpu, std::span(&op, 1)).ok());
  }
  EXPECT_EQ(host[0], std::byte{0x22}) << "a queued transfer ran after the engine was destroyed";
}

}  // namespace
}  // namespace kvc::cuda
