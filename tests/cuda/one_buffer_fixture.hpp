#pragma once
/// one_buffer_test<Engine>: a fixture with one engine of type Engine, 4 KiB of its device memory
/// (gpu_) and 4 KiB of host memory (host_, filled with 0x11), and a one-op submit between the
/// two at the same offset. Shared by the backends' own tests.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "cuda/copy_engine.hpp"

namespace kvc::cuda::testing {

template <class Engine>
class one_buffer_test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto buf = engine_.allocate_device(4096);
    ASSERT_TRUE(buf.ok());
    gpu_ = static_cast<std::byte*>(buf->data);
  }
  transfer_id submit(direction dir, size_t offset, size_t bytes) {
    copy_op op = dir == direction::gpu_to_cpu
                     ? copy_op{gpu_ + offset, host_.data() + offset, bytes}
                     : copy_op{host_.data() + offset, gpu_ + offset, bytes};
    auto id = engine_.submit(dir, std::span(&op, 1));
    EXPECT_TRUE(id.ok()) << id.error().to_string();
    return id.ok() ? *id : 0;
  }

  Engine engine_;
  std::byte* gpu_ = nullptr;
  std::vector<std::byte> host_ = std::vector<std::byte>(4096, std::byte{0x11});
};

}  // namespace kvc::cuda::testing
