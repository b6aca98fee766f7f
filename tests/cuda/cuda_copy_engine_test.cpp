// cuda-specific behaviour (CTest label gpu): the ordering rule, sticky-error latching and a device
// call failing after copies were queued. CUDA failures are simulated through
// engine_options::failure_hook. Skips without a device, fails then under KVC_REQUIRE_GPU=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/cuda_copy_engine.hpp"
#include "cuda/engine_factory.hpp"
#include "tests/cuda/gpu_required.hpp"

namespace kvc::cuda {
namespace {

constexpr int k_invalid_value = 1;      // cudaErrorInvalidValue
constexpr int k_illegal_address = 700;  // cudaErrorIllegalAddress
constexpr int k_not_supported = 801;    // cudaErrorNotSupported
constexpr int k_unknown = 999;          // cudaErrorUnknown: what a GPU lost from the bus answers

class CudaCopyEngineTest : public testing::Test {
 protected:
  void SetUp() override {
    engine_options opts{.backend = "cuda", .device = 0};
    opts.failure_hook = [this](std::string_view call) -> int {
      ++calls_[std::string(call)];
      auto it = fail_.find(std::string(call));
      if (it == fail_.end() || calls_[std::string(call)] != it->second.first) return 0;
      return it->second.second;
    };
    auto e = make_copy_engine(opts);
    if (e.code() == errc::device_unavailable) {
      if (gpu_required()) FAIL() << "KVC_REQUIRE_GPU=1: " << e.error().to_string();
      GTEST_SKIP() << "cuda backend cannot run here: " << e.error().to_string();
    }
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(e).value();
    auto dev = engine_->allocate_device(k_bytes);
    ASSERT_TRUE(dev.ok()) << dev.error().to_string();
    gpu_ = static_cast<std::byte*>(dev->data);
    host_ = static_cast<std::byte*>(std::aligned_alloc(4096, k_bytes));
    std::memset(host_, 0x11, k_bytes);
    ASSERT_TRUE(engine_->register_host(host_, k_bytes, 256).ok());
    std::vector<std::byte> pattern(k_bytes, std::byte{0x5A});
    ASSERT_TRUE(engine_->upload(gpu_, pattern.data(), k_bytes).ok());
  }
  void TearDown() override {
    engine_.reset();  // unregisters the host memory first
    std::free(host_);
  }
  /// Fails the n-th call (1-based, counted from now on) named `call` with `code`.
  void fail_nth(const std::string& call, int n, int code) {
    fail_[call] = {calls_[call] + n, code};
  }

  static constexpr size_t k_bytes = 4096;
  std::map<std::string, int> calls_;
  std::map<std::string, std::pair<int, int>> fail_;  ///< call -> (call number, code)
  std::unique_ptr<copy_engine> engine_;
  std::byte* gpu_ = nullptr;
  std::byte* host_ = nullptr;
};

TEST_F(CudaCopyEngineTest, SubmitWithoutOrderingIsRefused) {
  copy_op store{gpu_, host_, 256};
  auto refused = engine_->submit(direction::gpu_to_cpu, std::span(&store, 1));
  EXPECT_EQ(refused.code(), errc::invalid_argument);
  EXPECT_NE(refused.error().message().find("wait_event"), std::string::npos);
  auto ok = engine_->submit(direction::gpu_to_cpu, std::span(&store, 1), {.no_dependency = true});
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  ASSERT_TRUE(engine_->wait(std::span(&*ok, 1)).ok());
  EXPECT_EQ(engine_->poll(*ok), poll_state::done);
}

TEST_F(CudaCopyEngineTest, StickyErrorLatchesAndLaterSubmitsCallNoCuda) {
  fail_nth("cudaMemcpyAsync", 1, k_illegal_address);
  copy_op store{gpu_, host_, 256};
  auto first =
      engine_->submit(direction::gpu_to_cpu, std::span(&store, 1), {.no_dependency = true});
  EXPECT_EQ(first.code(), errc::device_error);
  EXPECT_NE(first.error().message().find("cudaErrorIllegalAddress"), std::string::npos)
      << first.error().message();
  const std::map<std::string, int> calls_after_latch = calls_;
  for (int k = 0; k < 3; ++k) {
    auto later =
        engine_->submit(direction::gpu_to_cpu, std::span(&store, 1), {.no_dependency = true});
    EXPECT_EQ(later.code(), errc::device_unavailable);
    EXPECT_NE(later.error().message().find("cudaErrorIllegalAddress"), std::string::npos);
  }
  EXPECT_EQ(calls_, calls_after_latch) << "a latched engine made CUDA calls";
}

TEST_F(CudaCopyEngineTest, FailureAfterQueuedCopiesCompletesAsFailedAfterThem) {
  fail_nth("cudaMemcpyBatchAsync", 1, k_not_supported);  // forces the per-op path
  fail_nth("cudaMemcpyAsync", 2, k_invalid_value);       // op 0 is queued, op 1 fails
  std::vector<copy_op> ops{{gpu_, host_, 256}, {gpu_ + 256, host_ + 256, 256}};
  auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << "op 0 was queued: the transfer must stay pending, not be refused: "
                       << id.error().to_string();
  ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
  EXPECT_EQ(engine_->poll(*id), poll_state::failed);
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].ok);
  EXPECT_EQ(reports[0].error, errc::device_error);
  EXPECT_NE(reports[0].detail.find("cudaMemcpyAsync returned cudaErrorInvalidValue"), std::string::npos)
      << reports[0].detail;
  EXPECT_EQ(host_[0], std::byte{0x5A}) << "the queued op ran before the failure was reported";
  EXPECT_EQ(host_[256], std::byte{0x11}) << "the failed op was copied";
}

TEST_F(CudaCopyEngineTest, FailedCompletionReportsTheCudaErrorName) {
  fail_nth("cudaEventQuery", 1, k_illegal_address);
  std::vector<copy_op> ops{{gpu_, host_, 256}};
  auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_FALSE(reports[0].ok);
  EXPECT_NE(reports[0].detail.find("cudaEventQuery returned cudaErrorIllegalAddress"), std::string::npos)
      << reports[0].detail;
}

// A batch the driver refuses for any reason (not only "not supported") turns batching off: the
// transfer is copied op by op, the reason is kept, and no later submit tries the batch again.
TEST_F(CudaCopyEngineTest, ARefusedBatchTurnsBatchingOffWithItsReason) {
  fail_nth("cudaMemcpyBatchAsync", 1, k_invalid_value);
  const std::vector<copy_op> ops{{gpu_, host_, 256}, {gpu_ + 256, host_ + 256, 256}};
  for (int k = 0; k < 3; ++k) {
    auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
    EXPECT_EQ(engine_->poll(*id), poll_state::done);
  }
  EXPECT_EQ(calls_["cudaMemcpyBatchAsync"], 1) << "a refused batch was tried again";
  const auto& cuda = static_cast<const cuda_copy_engine&>(*engine_);
  EXPECT_EQ(cuda.batched_transfers(), 0u);
  EXPECT_EQ(cuda.per_op_transfers(), 3u);
  EXPECT_NE(cuda.batch_refusal().find("cudaMemcpyBatchAsync returned cudaErrorInvalidValue"),
            std::string::npos)
      << cuda.batch_refusal();
  EXPECT_EQ(host_[300], std::byte{0x5A});
}

// A GPU that fell off the bus answers cudaErrorUnknown: the engine latches and stops calling.
TEST_F(CudaCopyEngineTest, TheCodeOfALostGpuLatches) {
  fail_nth("cudaEventQuery", 1, k_unknown);
  const std::vector<copy_op> ops{{gpu_, host_, 256}};
  auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
  EXPECT_EQ(engine_->health().code(), errc::device_unavailable);
  EXPECT_NE(engine_->health().message().find("cudaErrorUnknown"), std::string::npos);
  auto later = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  EXPECT_EQ(later.code(), errc::device_unavailable);
}

}  // namespace
}  // namespace kvc::cuda
