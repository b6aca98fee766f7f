// The cuda backend on a real device with kernels in the picture (CTest label gpu): a transfer is
// ordered after the compute stream's kernels in both directions, a bad pointer in an op list
// copies nothing, batched and per-op copies give the same bytes, a load is not held behind a
// store that waits for compute, a sticky device error fails what is in flight and every later
// submit (in a child process: the context is gone for good), and two processes pin their rank
// regions of one segment in small chunks with ops on a chunk boundary.
//
// Without a device every case skips with the reason; under KVC_REQUIRE_GPU=1 it fails instead.
// Every kernel's spin is bounded (tests/cuda/device_kernels.hpp), so the stream synchronisations
// below always return; the spins only make a missing order observable, no assertion depends
// on how long anything took.
#include <cuda.h>  // the driver's types for cuDevicePrimaryCtxGetState (found at run time)
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_copy_engine.hpp"
#include "cuda/engine_factory.hpp"
#include "shm/segment.hpp"
#include "tests/cuda/device_kernels.hpp"
#include "tests/cuda/gpu_required.hpp"
#include "tests/shm/shm_fixture.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::cuda {
namespace {

using namespace std::chrono_literals;
using namespace kvc::cuda::testing;

/// About 0.1 s of SM cycles: long enough that a copy not ordered after the kernel would run first.
constexpr int64_t spin_cycles = 200'000'000;
/// The longest the flag kernel spins if the flag never comes (about 20 s).
constexpr int64_t flag_cycles = 40'000'000'000;
/// Safety net for a child process: only a broken run reaches it.
constexpr auto patience = 120s;

constexpr size_t page = 64 << 10;  // one KV page / slot in these tests
constexpr size_t pages = 8;
constexpr size_t bytes = page * pages;

/// The options every case uses: device 0, a bounded wait.
engine_options device_options() {
  engine_options o;
  o.backend = "cuda";
  o.device = 0;
  o.wait_timeout = 30s;
  return o;
}

/// Host memory the tests register as the pool: page-aligned, freed with the object.
struct host_pool {
  explicit host_pool(size_t n, uint8_t fill)
      : data(static_cast<std::byte*>(std::aligned_alloc(4096, n)), &std::free), size(n) {
    std::memset(data.get(), fill, n);
  }
  std::byte* at(size_t offset) const { return data.get() + offset; }
  /// True when `n` bytes from `offset` all equal `value`.
  bool all(size_t offset, size_t n, uint8_t value) const {
    for (size_t i = 0; i < n; ++i) {
      if (data.get()[offset + i] != std::byte{value}) return false;
    }
    return true;
  }
  std::unique_ptr<std::byte, decltype(&std::free)> data;
  size_t size;
};

/// A flag the host sets and a kernel on the compute stream waits for (launch_wait_for_flag), in
/// mapped pinned memory: [0] the flag, [1] the kernel's "timed out" mark.
struct host_flag {
  host_flag() {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&host), 2 * sizeof(int), cudaHostAllocMapped),
              cudaSuccess);
    host[0] = 0;
    host[1] = 0;
    EXPECT_EQ(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device), host, 0), cudaSuccess);
  }
  ~host_flag() { EXPECT_EQ(cudaFreeHost(host), cudaSuccess); }
  host_flag(const host_flag&) = delete;
  host_flag& operator=(const host_flag&) = delete;
  /// Puts the waiting kernel on `stream`.
  int hold(cudaStream_t stream) const {
    return launch_wait_for_flag(stream, device, device + 1, flag_cycles);
  }
  void release() const { reinterpret_cast<volatile int*>(host)[0] = 1; }
  bool timed_out() const { return reinterpret_cast<volatile int*>(host)[1] != 0; }
  int* host = nullptr;
  int* device = nullptr;
};

class CudaDeviceTest : public ::testing::Test {
 protected:
  /// The engine's options (the gather suite takes the kernel path).
  virtual engine_options options() const { return device_options(); }

  void SetUp() override {
    auto e = make_copy_engine(options());
    if (e.code() == errc::device_unavailable) {
      if (gpu_required()) FAIL() << "KVC_REQUIRE_GPU=1: " << e.error().to_string();
      GTEST_SKIP() << "cuda backend cannot run here: " << e.error().to_string();
    }
    if (e.code() == errc::invalid_argument &&
        e.error().message().find("cannot use host pointers") != std::string::npos) {
      GTEST_SKIP() << "the gather kernel cannot run on this device: " << e.error().to_string();
    }
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(e).value();
    auto dev = engine_->allocate_device(bytes);
    ASSERT_TRUE(dev.ok()) << dev.error().to_string();
    gpu_ = static_cast<std::byte*>(dev->data);
    ASSERT_TRUE(engine_->register_host(pool_.at(0), bytes, page).ok());
    ASSERT_EQ(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&after_compute_, cudaEventDisableTiming), cudaSuccess);
  }
  void TearDown() override {
    if (compute_ != nullptr) {
      EXPECT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
      EXPECT_EQ(cudaStreamDestroy(compute_), cudaSuccess);
    }
    if (after_compute_ != nullptr) {
      EXPECT_EQ(cudaEventDestroy(after_compute_), cudaSuccess);
    }
    engine_.reset();  // frees its device memory, unregisters the pool
  }

  /// Fills `n` device bytes at `dst` with `value` (synchronously, through the engine).
  void fill_device(std::byte* dst, size_t n, uint8_t value) {
    std::vector<std::byte> v(n, std::byte{value});
    ASSERT_TRUE(engine_->upload(dst, v.data(), n).ok());
  }
  /// True when `n` device bytes at `src` all equal `value`.
  bool device_all(const std::byte* src, size_t n, uint8_t value) {
    std::vector<std::byte> v(n);
    if (!engine_->download(v.data(), src, n).ok()) return false;
    for (std::byte b : v) {
      if (b != std::byte{value}) return false;
    }
    return true;
  }
  /// Waits for `id` and returns its report (failing the test when the wait or report fails).
  transfer_report finish(transfer_id id) {
    EXPECT_TRUE(engine_->wait({&id, 1}).ok());
    for (transfer_report& r : engine_->take_finished()) {
      if (r.id == id) return r;
    }
    ADD_FAILURE() << "no report for transfer " << id;
    return {};
  }

  /// An engine of its own with a 200 ms wait_timeout, its own pool and the fixture's device
  /// memory (filled with `value`), and a one-page store submitted after a kernel that waits for
  /// `flag`: the store is held until the test releases the flag.
  struct held_store {
    std::unique_ptr<copy_engine> engine;
    host_pool* pool = nullptr;
    result<transfer_id> id = make_error(errc::internal, "not submitted");
  };
  held_store store_held_by_compute(const host_flag& flag, uint8_t value) {
    held_store h;
    engine_options o = device_options();
    o.wait_timeout = 200ms;
    auto e = make_copy_engine(o);
    if (!e.ok()) {
      h.id = e.error();
      return h;
    }
    h.engine = std::move(e).value();
    h.pool = &another_pool(bytes, 0x11);
    EXPECT_TRUE(h.engine->register_host(h.pool->at(0), bytes, page).ok());
    EXPECT_TRUE(h.engine->register_device(gpu_, bytes).ok());
    fill_device(gpu_, bytes, value);
    EXPECT_EQ(flag.hold(compute_), 0);
    EXPECT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
    const std::vector<copy_op> ops{{gpu_, h.pool->at(0), page}};
    h.id = h.engine->submit(direction::gpu_to_cpu, ops, {.wait_event = after_compute_});
    return h;
  }

  std::unique_ptr<copy_engine> engine_;
  std::byte* gpu_ = nullptr;
  /// A slow kernel on the compute stream writes 0x7E into every block (they held 0x22); a store
  /// of all pages waits for the event recorded after it. The pool must hold the kernel's bytes.
  void store_after_a_writing_kernel() {
    fill_device(gpu_, bytes, 0x22);
    ASSERT_EQ(launch_spin_then_fill(compute_, gpu_, bytes, 0x7E, spin_cycles), 0);
    ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
    std::vector<copy_op> ops;
    for (size_t p = 0; p < pages; ++p) ops.push_back({gpu_ + p * page, pool_.at(p * page), page});
    auto id = engine_->submit(direction::gpu_to_cpu, ops, {.wait_event = after_compute_});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    const transfer_report r = finish(*id);
    EXPECT_TRUE(r.ok) << r.detail;
    EXPECT_TRUE(pool_.all(0, bytes, 0x7E))
        << "the store read the blocks before the kernel wrote them";
  }

  host_pool pool_{bytes, 0x11};
  /// More host memory a case registers: freed only after every engine (members outlive
  /// TearDown), never while registered.
  std::vector<std::unique_ptr<host_pool>> more_pools_;
  host_pool& another_pool(size_t n, uint8_t fill) {
    return *more_pools_.emplace_back(std::make_unique<host_pool>(n, fill));
  }
  cudaStream_t compute_ = nullptr;
  cudaEvent_t after_compute_ = nullptr;
};

// A store submitted with the event recorded after the kernel that writes its blocks copies the
// kernel's bytes, never the ones before it.
TEST_F(CudaDeviceTest, AStoreWaitsForTheKernelThatWritesItsBlocks) {
  store_after_a_writing_kernel();
}

// A load submitted with the event recorded after the kernel that reads its blocks overwrites
// them only after the kernel read the old bytes.
TEST_F(CudaDeviceTest, ALoadWaitsForTheKernelThatReadsItsBlocks) {
  fill_device(gpu_, bytes, 0x22);
  std::memset(pool_.at(0), 0x5C, bytes);
  auto scratch = engine_->allocate_device(bytes);
  ASSERT_TRUE(scratch.ok()) << scratch.error().to_string();
  ASSERT_EQ(launch_spin_then_copy(compute_, gpu_, scratch->data, bytes, spin_cycles), 0);
  ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
  std::vector<copy_op> ops;
  for (size_t p = 0; p < pages; ++p) ops.push_back({pool_.at(p * page), gpu_ + p * page, page});
  auto id = engine_->submit(direction::cpu_to_gpu, ops, {.wait_event = after_compute_});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  const transfer_report r = finish(*id);
  EXPECT_TRUE(r.ok) << r.detail;
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_TRUE(device_all(static_cast<std::byte*>(scratch->data), bytes, 0x22))
      << "the load overwrote the blocks while the kernel was still reading them";
  EXPECT_TRUE(device_all(gpu_, bytes, 0x5C));
}

// One op outside the registered pool in the middle of a list: the submit is refused before any
// copy is queued, and the engine goes on working.
TEST_F(CudaDeviceTest, ABadPointerInTheMiddleOfAnOpListCopiesNothing) {
  fill_device(gpu_, bytes, 0x33);
  host_pool outside(page, 0x44);  // host memory the engine never registered
  const std::vector<copy_op> ops{{gpu_, pool_.at(0), page},
                                 {gpu_ + page, outside.at(0), page},
                                 {gpu_ + 2 * page, pool_.at(2 * page), page}};
  auto refused = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), errc::invalid_argument) << refused.error().to_string();
  EXPECT_TRUE(pool_.all(0, bytes, 0x11)) << "a refused submit copied something";
  EXPECT_TRUE(outside.all(0, page, 0x44));
  EXPECT_TRUE(engine_->take_finished().empty());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the engine left its own error behind";

  const std::vector<copy_op> good{{gpu_, pool_.at(0), page}};
  auto id = engine_->submit(direction::gpu_to_cpu, good, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  EXPECT_TRUE(finish(*id).ok);
  EXPECT_TRUE(pool_.all(0, page, 0x33));
  EXPECT_TRUE(pool_.all(page, bytes - page, 0x11));
}

// CUDA's last error belongs to the host application: the engine's successful calls neither
// clear an error the host left pending nor add one.
TEST_F(CudaDeviceTest, TheHostsOwnCudaErrorIsLeftToTheHost) {
  void* never = nullptr;
  const cudaError_t host_error = cudaMalloc(&never, size_t{1} << 62);  // now pending
  ASSERT_NE(host_error, cudaSuccess);
  fill_device(gpu_, bytes, 0x3C);
  const std::vector<copy_op> ops{{gpu_, pool_.at(0), page}, {gpu_ + page, pool_.at(page), page}};
  auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  EXPECT_TRUE(finish(*id).ok);
  EXPECT_EQ(cudaGetLastError(), host_error) << "the engine cleared the host's error";
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The same ops through cudaMemcpyBatchAsync (when the driver takes it) and through per-op
// cudaMemcpyAsync give the same bytes, sizes and offsets that are not multiples of anything
// included.
TEST_F(CudaDeviceTest, BatchedAndPerOpCopiesGiveTheSameBytes) {
  std::vector<std::byte> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = std::byte(static_cast<uint8_t>(i * 131 + 7));
  ASSERT_TRUE(engine_->upload(gpu_, pattern.data(), bytes).ok());
  const std::array<std::pair<size_t, size_t>, 5> pieces{
      {{0, page}, {page + 1, 1000}, {3 * page + 17, 4093}, {5 * page, 2 * page}, {7 * page, 3}}};
  auto ops_into = [&](const host_pool& into) {
    std::vector<copy_op> ops;
    for (auto [offset, n] : pieces) ops.push_back({gpu_ + offset, into.at(offset), n});
    return ops;
  };

  engine_options per_op_options = device_options();
  per_op_options.batch_copies = false;
  host_pool& batched_pool = another_pool(bytes, 0);
  host_pool& per_op_pool = another_pool(bytes, 0);
  auto per_op = make_copy_engine(per_op_options);
  ASSERT_TRUE(per_op.ok()) << per_op.error().to_string();
  ASSERT_TRUE(engine_->register_host(batched_pool.at(0), bytes, page).ok());
  ASSERT_TRUE((*per_op)->register_host(per_op_pool.at(0), bytes, page).ok());
  ASSERT_TRUE((*per_op)->register_device(gpu_, bytes).ok());  // the first engine's allocation

  auto a = engine_->submit(direction::gpu_to_cpu, ops_into(batched_pool), {.no_dependency = true});
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_TRUE(finish(*a).ok);
  auto b = (*per_op)->submit(direction::gpu_to_cpu, ops_into(per_op_pool), {.no_dependency = true});
  ASSERT_TRUE(b.ok()) << b.error().to_string();
  ASSERT_TRUE((*per_op)->wait({&*b, 1}).ok());
  const auto reports = (*per_op)->take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].ok) << reports[0].detail;

  for (auto [offset, n] : pieces) {
    EXPECT_EQ(std::memcmp(batched_pool.at(offset), pattern.data() + offset, n), 0) << offset;
  }
  EXPECT_EQ(std::memcmp(batched_pool.at(0), per_op_pool.at(0), bytes), 0);
  EXPECT_EQ((*per_op)->batched_transfers(), 0u);
  const auto& cuda_per_op = static_cast<const cuda_copy_engine&>(**per_op);
  EXPECT_EQ(cuda_per_op.per_op_transfers(), 1u);
  // A driver of CUDA 12.8 or later has cudaMemcpyBatchAsync: the default engine must have
  // batched, else this case compared the per-op path with itself.
  const auto& cuda_default = static_cast<const cuda_copy_engine&>(*engine_);
  EXPECT_EQ(cuda_default.batched_transfers() + cuda_default.per_op_transfers(), 1u);
  int driver = 0;
  ASSERT_EQ(cudaDriverGetVersion(&driver), cudaSuccess);
  if (driver >= 12080) {
    EXPECT_EQ(cuda_default.batched_transfers(), 1u)
        << "driver " << driver << " refused the batch: " << cuda_default.batch_refusal();
  }
  std::cout << "driver " << driver << ", batched transfers on the default engine: "
            << cuda_default.batched_transfers() << "\n";
}

// Loads and stores run on their own streams: a store held behind a compute kernel (waiting for
// a flag only the host sets) does not hold a load back.
TEST_F(CudaDeviceTest, ALoadCompletesWhileAStoreWaitsForCompute) {
  host_flag flag;
  fill_device(gpu_, bytes, 0x66);
  std::memset(pool_.at(4 * page), 0x77, 4 * page);

  ASSERT_EQ(flag.hold(compute_), 0);
  ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
  const std::vector<copy_op> store_ops{{gpu_, pool_.at(0), 4 * page}};
  auto store = engine_->submit(direction::gpu_to_cpu, store_ops, {.wait_event = after_compute_});
  ASSERT_TRUE(store.ok()) << store.error().to_string();
  const std::vector<copy_op> load_ops{{pool_.at(4 * page), gpu_ + 4 * page, 4 * page}};
  auto load = engine_->submit(direction::cpu_to_gpu, load_ops, {.no_dependency = true});
  ASSERT_TRUE(load.ok()) << load.error().to_string();

  EXPECT_TRUE(finish(*load).ok);
  EXPECT_EQ(engine_->poll(*store), poll_state::pending) << "the store ran before compute ended";
  flag.release();
  EXPECT_TRUE(finish(*store).ok);
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_FALSE(flag.timed_out()) << "the kernel never saw the flag";
  EXPECT_TRUE(pool_.all(0, 4 * page, 0x66));
  EXPECT_TRUE(device_all(gpu_ + 4 * page, 4 * page, 0x77));
}

// Completion is FIFO per direction because a direction's transfers share one stream: a store
// submitted without dependency behind a store held by compute cannot finish first, although a
// load (the other direction) submitted after both does. Were a direction's transfers spread
// over several streams, the second store would be done by the time the load is.
TEST_F(CudaDeviceTest, ALaterTransferNeverCompletesBeforeAnEarlierOneInItsDirection) {
  host_flag flag;
  fill_device(gpu_, bytes, 0x2D);
  ASSERT_EQ(flag.hold(compute_), 0);
  ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
  const std::vector<copy_op> held_ops{{gpu_, pool_.at(0), page}};
  const std::vector<copy_op> free_ops{{gpu_ + page, pool_.at(page), page}};
  const std::vector<copy_op> load_ops{{pool_.at(4 * page), gpu_ + 4 * page, page}};
  auto held = engine_->submit(direction::gpu_to_cpu, held_ops, {.wait_event = after_compute_});
  auto later = engine_->submit(direction::gpu_to_cpu, free_ops, {.no_dependency = true});
  auto load = engine_->submit(direction::cpu_to_gpu, load_ops, {.no_dependency = true});
  ASSERT_TRUE(held.ok() && later.ok() && load.ok());
  EXPECT_TRUE(finish(*load).ok);
  EXPECT_EQ(engine_->poll(*later), poll_state::pending) << "a later store finished first";
  EXPECT_TRUE(pool_.all(page, page, 0x11)) << "the later store ran before the held one";
  flag.release();
  const std::vector<transfer_id> both{*held, *later};
  ASSERT_TRUE(engine_->wait(both).ok());
  const auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].id, *held);
  EXPECT_EQ(reports[1].id, *later);
  EXPECT_TRUE(pool_.all(0, 2 * page, 0x2D));
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_FALSE(flag.timed_out());
}

// wait() is bounded: past engine_options::wait_timeout it answers errc::timeout and the
// transfer stays pending, to finish normally once compute lets it.
TEST_F(CudaDeviceTest, AWaitPastItsDeadlineAnswersTimeoutAndTheTransferStaysPending) {
  host_flag flag;
  held_store h = store_held_by_compute(flag, 0x4B);
  ASSERT_TRUE(h.engine && h.id.ok()) << h.id.error().to_string();
  auto& short_wait = *h.engine;
  host_pool& pool = *h.pool;
  const auto id = h.id;
  const status timed_out = short_wait.wait({&*id, 1});
  EXPECT_EQ(timed_out.code(), errc::timeout) << timed_out.to_string();
  EXPECT_EQ(short_wait.poll(*id), poll_state::pending);
  EXPECT_TRUE(pool.all(0, page, 0x11));
  flag.release();
  ASSERT_TRUE(short_wait.wait({&*id, 1}).ok());
  EXPECT_EQ(short_wait.poll(*id), poll_state::done);
  EXPECT_TRUE(pool.all(0, page, 0x4B));
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_FALSE(flag.timed_out());
}

// Shutdown is bounded: an engine destroyed while a transfer waits for a compute kernel that
// waits for the host returns after its wait_timeout instead of hanging the worker, and frees
// nothing the copy may still touch (the copy completes once compute lets it).
TEST_F(CudaDeviceTest, ShutdownWithATransferHeldByComputeDoesNotHang) {
  host_flag flag;
  held_store h = store_held_by_compute(flag, 0x5D);
  ASSERT_TRUE(h.engine && h.id.ok()) << h.id.error().to_string();
  host_pool& pool = *h.pool;
  h.engine.reset();  // returns after the 200 ms wait, the copy still queued behind compute
  EXPECT_EQ(cudaStreamQuery(compute_), cudaErrorNotReady)
      << "the engine's shutdown waited for the compute kernel";
  (void)cudaGetLastError();
  flag.release();
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_FALSE(flag.timed_out());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the leaked stream's copy ran
  EXPECT_TRUE(pool.all(0, page, 0x5D));
  // The engine left the pool registered on purpose: unregister it here, or a later case whose
  // host memory reuses these addresses could not register it (cudaErrorHostMemoryAlreadyRegistered).
  EXPECT_EQ(cudaHostUnregister(pool.at(0)), cudaSuccess);
}

// Polling a transfer still running leaves no cudaErrorNotReady as the thread's last error (an
// engine's next kernel-launch check, PyTorch's, would raise it).
TEST_F(CudaDeviceTest, PollingAPendingTransferLeavesNoErrorBehind) {
  host_flag flag;
  ASSERT_EQ(flag.hold(compute_), 0);
  ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
  const std::vector<copy_op> ops{{gpu_, pool_.at(0), page}};
  auto id = engine_->submit(direction::gpu_to_cpu, ops, {.wait_event = after_compute_});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  EXPECT_EQ(engine_->poll(*id), poll_state::pending);
  EXPECT_TRUE(engine_->take_finished().empty());
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the engine left cudaErrorNotReady behind";
  flag.release();
  EXPECT_TRUE(finish(*id).ok);
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
}

// An upload from pageable memory is finished when upload() returns: a store submitted right
// after it copies the uploaded bytes (a cudaMemcpy on the legacy stream may still be moving them
// while the engine's own streams run).
TEST_F(CudaDeviceTest, AnUploadIsFinishedBeforeTheNextTransferRuns) {
  constexpr size_t big = size_t{32} << 20;
  auto dev = engine_->allocate_device(big);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  host_pool& pool = another_pool(big, 0);
  ASSERT_TRUE(engine_->register_host(pool.at(0), big, big).ok());
  for (int round = 0; round < 4; ++round) {
    const auto value = static_cast<uint8_t>(0xA0 + round);
    std::vector<std::byte> pageable(big, std::byte{value});
    ASSERT_TRUE(engine_->upload(dev->data, pageable.data(), big).ok());
    const std::vector<copy_op> ops{{dev->data, pool.at(0), big}};
    auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    EXPECT_TRUE(finish(*id).ok);
    EXPECT_TRUE(pool.all(0, big, value)) << "round " << round;
  }
}

// --- the gather kernel (engine_options::path = kernel) ----------------------------------------

class CudaDeviceGatherTest : public CudaDeviceTest {
 protected:
  engine_options options() const override {
    engine_options o = device_options();
    o.path = copy_path::kernel;
    return o;
  }
};

// The kernel copies sizes and offsets of every alignment exactly, both ways.
TEST_F(CudaDeviceGatherTest, TheKernelCopiesEveryOpExactlyBothWays) {
  std::vector<std::byte> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = std::byte(static_cast<uint8_t>(i * 29 + 3));
  ASSERT_TRUE(engine_->upload(gpu_, pattern.data(), bytes).ok());
  const std::array<std::pair<size_t, size_t>, 6> pieces{{{0, page},
                                                         {page + 1, 1000},
                                                         {2 * page + 16, 4096},
                                                         {3 * page + 17, 4093},
                                                         {5 * page, 2 * page},
                                                         {7 * page, 3}}};
  std::vector<copy_op> store_ops;
  for (auto [offset, n] : pieces) store_ops.push_back({gpu_ + offset, pool_.at(offset), n});
  auto store = engine_->submit(direction::gpu_to_cpu, store_ops, {.no_dependency = true});
  ASSERT_TRUE(store.ok()) << store.error().to_string();
  EXPECT_TRUE(finish(*store).ok);
  for (auto [offset, n] : pieces) {
    EXPECT_EQ(std::memcmp(pool_.at(offset), pattern.data() + offset, n), 0) << offset;
  }
  EXPECT_TRUE(pool_.all(page + 1001, page - 1001, 0x11)) << "the kernel wrote outside its ops";

  auto back = engine_->allocate_device(bytes);
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  auto* dst = static_cast<std::byte*>(back->data);
  fill_device(dst, bytes, 0);
  std::vector<copy_op> load_ops;
  for (auto [offset, n] : pieces) load_ops.push_back({pool_.at(offset), dst + offset, n});
  auto load = engine_->submit(direction::cpu_to_gpu, load_ops, {.no_dependency = true});
  ASSERT_TRUE(load.ok()) << load.error().to_string();
  EXPECT_TRUE(finish(*load).ok);
  std::vector<std::byte> loaded(bytes);
  ASSERT_TRUE(engine_->download(loaded.data(), dst, bytes).ok());
  for (auto [offset, n] : pieces) {
    EXPECT_EQ(std::memcmp(loaded.data() + offset, pattern.data() + offset, n), 0) << offset;
  }
  EXPECT_EQ(engine_->kernel_transfers(), 2u);
  EXPECT_EQ(engine_->batched_transfers(), 0u);
}

// A kernel-path store waits for the compute stream's event like a DMA one.
TEST_F(CudaDeviceGatherTest, AKernelStoreWaitsForTheKernelThatWritesItsBlocks) {
  store_after_a_writing_kernel();
  EXPECT_EQ(engine_->kernel_transfers(), 1u);
}

// Descriptor slots are taken while their kernel may run: with every slot's transfer held
// behind compute, further transfers go by memcpy; each slot is free again once its transfer
// completed, and every transfer copied the right bytes.
TEST_F(CudaDeviceGatherTest, ADescriptorSlotIsNotReusedWhileItsTransferIsPending) {
  host_flag flag;
  std::vector<std::byte> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = std::byte(static_cast<uint8_t>(i * 7 + 1));
  ASSERT_TRUE(engine_->upload(gpu_, pattern.data(), bytes).ok());

  ASSERT_EQ(flag.hold(compute_), 0);
  ASSERT_EQ(cudaEventRecord(after_compute_, compute_), cudaSuccess);
  constexpr size_t piece = 1024;
  constexpr int held = cuda_copy_engine::ring_slots + 2;
  std::vector<transfer_id> ids;
  for (int t = 0; t < held; ++t) {
    const size_t at = static_cast<size_t>(t) * 2 * piece;
    const std::vector<copy_op> ops{{gpu_ + at, pool_.at(at), piece},
                                   {gpu_ + at + piece, pool_.at(at + piece), piece}};
    auto id = engine_->submit(direction::gpu_to_cpu, ops, {.wait_event = after_compute_});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    ids.push_back(*id);
  }
  EXPECT_EQ(engine_->kernel_transfers(), uint64_t{cuda_copy_engine::ring_slots});
  EXPECT_EQ(static_cast<const cuda_copy_engine&>(*engine_).kernel_fallbacks(), 2u);
  EXPECT_EQ(engine_->poll(ids.back()), poll_state::pending);
  flag.release();
  ASSERT_TRUE(engine_->wait(ids).ok());
  for (const transfer_report& r : engine_->take_finished()) EXPECT_TRUE(r.ok) << r.detail;
  const size_t copied = static_cast<size_t>(held) * 2 * piece;
  EXPECT_EQ(std::memcmp(pool_.at(0), pattern.data(), copied), 0);
  ASSERT_EQ(cudaStreamSynchronize(compute_), cudaSuccess);
  EXPECT_FALSE(flag.timed_out()) << "the kernel never saw the flag";

  const std::vector<copy_op> again{{gpu_, pool_.at(0), piece},
                                   {gpu_ + piece, pool_.at(piece), piece}};
  auto id = engine_->submit(direction::gpu_to_cpu, again, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  EXPECT_TRUE(finish(*id).ok);
  EXPECT_EQ(engine_->kernel_transfers(), uint64_t{cuda_copy_engine::ring_slots} + 1)
      << "the slots were not given back";
}

// A burst of small-page transfers: slots whose transfers completed are given back at the next
// submit that finds none free, without waiting for the owner's take_finished.
TEST_F(CudaDeviceGatherTest, CompletedSlotsAreReclaimedAtSubmit) {
  constexpr size_t piece = 1024;
  const auto burst = static_cast<size_t>(cuda_copy_engine::ring_slots) * 3;
  for (size_t t = 0; t < burst; ++t) {
    const size_t at = (t % (bytes / (2 * piece))) * 2 * piece;
    const std::vector<copy_op> ops{{gpu_ + at, pool_.at(at), piece},
                                   {gpu_ + at + piece, pool_.at(at + piece), piece}};
    auto id = engine_->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    // Each ring's worth has finished on the device before the next ring's worth is submitted.
    if ((t + 1) % cuda_copy_engine::ring_slots == 0) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
  }
  EXPECT_EQ(engine_->kernel_transfers(), burst);
  EXPECT_EQ(static_cast<const cuda_copy_engine&>(*engine_).kernel_fallbacks(), 0u);
  EXPECT_EQ(engine_->take_finished().size(), burst);
}

// --- cases in child processes ---------------------------------------------------------------

/// This test binary's path, to start a child case in a fresh process.
std::string self_path() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string{};
}

/// Starts the disabled child case `name` with `input` on its stdin and returns its exit code
/// and output; skips (or fails under KVC_REQUIRE_GPU=1) when the child found no device.
struct child_result {
  int code = -1;
  std::string out;
  std::string err;
};
result<kvc::testing::child_process> start_child_case(const std::string& name,
                                                    const std::string& input) {
  auto c = kvc::testing::child_process::start(
      {self_path(), "--gtest_filter=CudaDeviceChild.DISABLED_" + name,
       "--gtest_also_run_disabled_tests"});
  if (c.ok() && !input.empty()) (void)c->write_line(input);
  return c;
}
child_result finish_child_case(result<kvc::testing::child_process>& c) {
  if (!c.ok()) return {-1, "", c.error().to_string()};
  auto code = c->wait_exit(std::chrono::duration_cast<std::chrono::milliseconds>(patience));
  return {code.ok() ? *code : -1, c->stdout_text(), c->stderr_text()};
}
child_result run_child_case(const std::string& name, const std::string& input) {
  auto c = start_child_case(name, input);
  return finish_child_case(c);
}

constexpr const char* no_device_mark = "child: no device: ";
/// A child that cannot run its case here (one GPU where two are needed) says why after this.
constexpr const char* skip_mark = "child: skip: ";
constexpr const char* passed_mark = "[  PASSED  ] 1 test.";

/// In a child case: the engine, or nullptr after printing why there is none.
std::unique_ptr<copy_engine> child_engine(const engine_options& o) {
  auto e = make_copy_engine(o);
  if (!e.ok()) {
    std::cout << no_device_mark << e.error().to_string() << std::endl;
    return nullptr;
  }
  return std::move(e).value();
}

/// The line of `text` holding `mark`, without the mark; "" when none does.
std::string line_after(const std::string& text, const std::string& mark) {
  const size_t at = text.find(mark);
  if (at == std::string::npos) return {};
  const size_t from = at + mark.size();
  return text.substr(from, text.find('\n', from) - from);
}

/// What the parent does with a child's result: skip without a device, else demand a pass.
#define KVC_EXPECT_CHILD_PASSED(r)                                                        \
  do {                                                                                    \
    if (const std::string why = line_after((r).out, no_device_mark); !why.empty()) {      \
      if (gpu_required()) FAIL() << "KVC_REQUIRE_GPU=1: " << why;                         \
      GTEST_SKIP() << "cuda backend cannot run here: " << why;                            \
    }                                                                                     \
    if (const std::string why = line_after((r).out, skip_mark); !why.empty()) {           \
      GTEST_SKIP() << why;                                                                \
    }                                                                                     \
    EXPECT_EQ((r).code, 0) << (r).out << (r).err;                                         \
    EXPECT_NE((r).out.find(passed_mark), std::string::npos) << (r).out << (r).err;        \
  } while (false)

// A kernel faults (a write through an address nothing holds) with transfers queued behind it:
// every transfer reports failed with the CUDA error, wait() returns, health() names the error,
// and a later submit answers device_unavailable without calling CUDA.
TEST(CudaDeviceChild, DISABLED_StickyError) {
  uint64_t cuda_calls = 0;
  engine_options o = device_options();
  o.failure_hook = [&](std::string_view) {
    ++cuda_calls;
    return 0;  // counts the calls, fails none
  };
  auto engine = child_engine(o);
  if (!engine) GTEST_SKIP();
  auto dev = engine->allocate_device(bytes);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto* gpu = static_cast<std::byte*>(dev->data);
  host_pool pool(bytes, 0x11);
  ASSERT_TRUE(engine->register_host(pool.at(0), bytes, page).ok());
  cudaStream_t compute = nullptr;
  cudaEvent_t after = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&after, cudaEventDisableTiming), cudaSuccess);

  ASSERT_EQ(launch_spin_then_fill(compute, gpu, bytes, 0x55, spin_cycles), 0);
  ASSERT_EQ(launch_write_through(compute, reinterpret_cast<int*>(uintptr_t{16})), 0);
  ASSERT_EQ(cudaEventRecord(after, compute), cudaSuccess);
  const std::vector<copy_op> store_ops{{gpu, pool.at(0), 2 * page}};
  const std::vector<copy_op> load_ops{{pool.at(4 * page), gpu + 4 * page, 2 * page}};
  auto store = engine->submit(direction::gpu_to_cpu, store_ops, {.wait_event = after});
  auto load = engine->submit(direction::cpu_to_gpu, load_ops, {.wait_event = after});
  ASSERT_TRUE(store.ok() && load.ok());

  const std::vector<transfer_id> ids{*store, *load};
  ASSERT_TRUE(engine->wait(ids).ok()) << "wait must return once the device failed";
  const auto reports = engine->take_finished();
  ASSERT_EQ(reports.size(), 2u);
  for (const transfer_report& r : reports) {
    EXPECT_FALSE(r.ok) << r.id;
    EXPECT_TRUE(r.error == errc::device_error || r.error == errc::device_unavailable) << r.id;
    EXPECT_NE(r.detail.find("cudaError"), std::string::npos) << r.detail;
  }
  const status health = engine->health();
  EXPECT_EQ(health.code(), errc::device_unavailable);
  EXPECT_NE(health.message().find("cudaError"), std::string::npos) << health.message();
  std::cout << "child: " << health.message() << std::endl;

  const uint64_t before = cuda_calls;
  auto later = engine->submit(direction::gpu_to_cpu, store_ops, {.no_dependency = true});
  ASSERT_FALSE(later.ok());
  EXPECT_EQ(later.code(), errc::device_unavailable);
  EXPECT_EQ(cuda_calls, before) << "a submit to a latched device called CUDA";
}

TEST(CudaDeviceProcessTest, AStickyErrorFailsTransfersInFlightAndEveryLaterSubmit) {
  const child_result r = run_child_case("StickyError", "");
  KVC_EXPECT_CHILD_PASSED(r);
}

// Two ranks' processes pin their regions of one segment in chunks of 4 slots: ops on slots 3 and
// 4 (the two sides of a chunk boundary) copy, an op across the boundary is refused.
constexpr uint32_t seg_slots = 8;
constexpr uint32_t chunk_slots = 4;

uint8_t rank_byte(rank_id r) { return static_cast<uint8_t>(0x40 + r); }

TEST(CudaDeviceChild, DISABLED_PinsItsRankRegion) {
  std::string name;
  rank_id rank = 0;
  ASSERT_TRUE(static_cast<bool>(std::cin >> name >> rank))
      << "expected '<segment> <rank>' on stdin";
  auto seg = shm::segment::attach(name);
  ASSERT_TRUE(seg.ok()) << seg.error().to_string();
  const uint64_t stride = seg->geometry().slot_stride();
  engine_options o = device_options();
  o.pin_chunk_bytes = chunk_slots * stride;
  auto engine = child_engine(o);
  if (!engine) GTEST_SKIP();
  const std::span<std::byte> region = seg->rank_region(rank);
  ASSERT_TRUE(engine->register_host(region.data(), region.size(), stride).ok());
  auto dev = engine->allocate_device(2 * page);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto* gpu = static_cast<std::byte*>(dev->data);
  std::vector<std::byte> fill(2 * page, std::byte{rank_byte(rank)});
  ASSERT_TRUE(engine->upload(gpu, fill.data(), fill.size()).ok());

  const std::vector<copy_op> edge{{gpu, seg->slot(rank, chunk_slots - 1), page},
                                  {gpu + page, seg->slot(rank, chunk_slots), page}};
  auto id = engine->submit(direction::gpu_to_cpu, edge, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  ASSERT_TRUE(engine->wait({&*id, 1}).ok());
  const auto reports = engine->take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(reports[0].ok) << reports[0].detail;

  const std::vector<copy_op> across{{gpu, seg->slot(rank, chunk_slots - 1) + page / 2, page}};
  auto refused = engine->submit(direction::gpu_to_cpu, across, {.no_dependency = true});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), errc::invalid_argument) << refused.error().to_string();
}

class CudaDeviceSegmentTest : public shm::testing::ShmTest {};

// In a fresh process (the kernel's module not loaded yet): the first gather transfer runs while
// a compute kernel still runs. The engine loaded the module when it was built; a module loaded
// lazily inside the submit may synchronise the context, and the copy would then wait for the
// compute kernel (which waits for the host, which waits for the copy).
TEST(CudaDeviceChild, DISABLED_FirstGatherLaunchWhileComputeRuns) {
  engine_options o = device_options();
  o.path = copy_path::kernel;
  auto engine = child_engine(o);
  if (!engine) GTEST_SKIP();
  auto dev = engine->allocate_device(bytes);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  auto* gpu = static_cast<std::byte*>(dev->data);
  host_pool pool(bytes, 0x11);
  ASSERT_TRUE(engine->register_host(pool.at(0), bytes, page).ok());
  std::vector<std::byte> fill(bytes, std::byte{0x3E});
  ASSERT_TRUE(engine->upload(gpu, fill.data(), bytes).ok());
  cudaStream_t compute = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking), cudaSuccess);
  {
    host_flag flag;
    ASSERT_EQ(flag.hold(compute), 0);
    const std::vector<copy_op> ops{{gpu, pool.at(0), page}, {gpu + page, pool.at(page), page}};
    auto id = engine->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    ASSERT_TRUE(engine->wait({&*id, 1}).ok());
    EXPECT_EQ(engine->kernel_transfers(), 1u);
    EXPECT_EQ(cudaStreamQuery(compute), cudaErrorNotReady)
        << "the compute kernel ended before the copy: the copy waited for it";
    (void)cudaGetLastError();
    EXPECT_TRUE(pool.all(0, 2 * page, 0x3E));
    flag.release();
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    EXPECT_FALSE(flag.timed_out()) << "the compute kernel gave up waiting for the host";
  }
  EXPECT_EQ(cudaStreamDestroy(compute), cudaSuccess);
}

TEST(CudaDeviceProcessTest, TheFirstGatherLaunchDoesNotWaitForCompute) {
  const child_result r = run_child_case("FirstGatherLaunchWhileComputeRuns", "");
  KVC_EXPECT_CHILD_PASSED(r);
}

// In a fresh process whose thread has no CUDA context: an engine on device 1 copies, and GPU 0
// gets no context (before, the device guard "restored" device 0 and created its primary
// context in every worker of a node).
TEST(CudaDeviceChild, DISABLED_AnEngineOnDeviceOneCreatesNoContextOnDeviceZero) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    std::cout << skip_mark << "needs two GPUs, this machine has " << devices << std::endl;
    GTEST_SKIP();
  }
  engine_options o = device_options();
  o.device = 1;
  auto engine = child_engine(o);
  if (!engine) GTEST_SKIP();
  auto dev = engine->allocate_device(bytes);
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  host_pool pool(bytes, 0x11);
  ASSERT_TRUE(engine->register_host(pool.at(0), bytes, page).ok());
  const std::vector<copy_op> ops{{dev->data, pool.at(0), page}};
  auto id = engine->submit(direction::gpu_to_cpu, ops, {.no_dependency = true});
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  ASSERT_TRUE(engine->wait({&*id, 1}).ok());
  using primary_state_fn = CUresult (*)(CUdevice, unsigned int*, int*);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn, 12000,
                                             cudaEnableDefault, &found),
            cudaSuccess);
  ASSERT_EQ(found, cudaDriverEntryPointSuccess);
  unsigned int flags = 0;
  int active = -1;
  ASSERT_EQ(reinterpret_cast<primary_state_fn>(fn)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0) << "GPU 0's primary context was created by an engine on GPU 1";
}

TEST(CudaDeviceProcessTest, AnEngineOnDeviceOneCreatesNoContextOnDeviceZero) {
  const child_result r = run_child_case("AnEngineOnDeviceOneCreatesNoContextOnDeviceZero", "");
  KVC_EXPECT_CHILD_PASSED(r);
}

TEST_F(CudaDeviceSegmentTest, TwoProcessesPinTheirRankRegionsInSmallChunks) {
  const std::string name = unique_name();
  const shm::pool_geometry g{.world_size = 2, .num_slots = seg_slots, .slot_bytes = page};
  auto seg = shm::segment::create(name, g);
  ASSERT_TRUE(seg.ok()) << seg.error().to_string();
  // Both processes run at once: each pins and copies while the other does.
  std::array<result<kvc::testing::child_process>, 2> children{
      start_child_case("PinsItsRankRegion", name + " 0"),
      start_child_case("PinsItsRankRegion", name + " 1")};
  for (auto& child : children) {
    const child_result c = finish_child_case(child);
    KVC_EXPECT_CHILD_PASSED(c);
  }
  for (rank_id r = 0; r < 2; ++r) {
    for (uint32_t s = 0; s < seg_slots; ++s) {
      const bool copied = s == chunk_slots - 1 || s == chunk_slots;
      const std::byte want{copied ? rank_byte(r) : uint8_t{0}};
      const std::byte* p = seg->slot(r, s);
      bool same = true;
      for (size_t i = 0; i < page; ++i) same = same && p[i] == want;
      EXPECT_TRUE(same) << "rank " << r << " slot " << s;
    }
  }
}

}  // namespace
}  // namespace kvc::cuda
