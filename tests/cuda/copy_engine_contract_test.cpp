// Contract suite of copy_engine: written once, instantiated for every backend built into this
// binary (sim, manual, cuda) plus the faulty decorator (empty plan) around sim. No test relies on
// a transfer finishing by itself: each one waits, which is the contract (the manual backend
// completes transfers only then). The cuda instance exists in every build and carries CTest label
// `gpu`: it skips, saying why, when the backend is not built or there is no device, and fails
// instead when the environment sets KVC_REQUIRE_GPU=1 (a machine that must have a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/engine_factory.hpp"
#include "cuda/faulty_copy_engine.hpp"
#include "cuda/kv_layout.hpp"
#include "cuda/sim_copy_engine.hpp"
#include "tests/cuda/gpu_required.hpp"

namespace kvc::cuda {
namespace {

constexpr const char* k_faulty_sim = "faulty(sim)";

std::vector<std::string> engine_kinds() {
  std::vector<std::string> kinds = built_backends();
  if (std::find(kinds.begin(), kinds.end(), "cuda") == kinds.end()) kinds.push_back("cuda");
  kinds.push_back(k_faulty_sim);
  return kinds;
}

/// Page-aligned host memory standing for the rank's pool region (cudaHostRegister wants pages).
struct host_pool {
  explicit host_pool(size_t n)
      : bytes(n),
        data(static_cast<std::byte*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {
    std::memset(data, 0xEE, bytes);
  }
  ~host_pool() { std::free(data); }
  host_pool(const host_pool&) = delete;
  host_pool& operator=(const host_pool&) = delete;
  size_t bytes;
  std::byte* data;
};

uint8_t pattern(size_t tensor, size_t offset) {
  uint64_t x = (tensor + 1) * 0x9E3779B97F4A7C15ULL ^ (offset * 0xBF58476D1CE4E5B9ULL);
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

uint64_t checksum(const std::byte* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ULL;
  return h;
}

std::string param_name(const testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

class CopyEngineContract : public testing::TestWithParam<std::string> {
 protected:
  static constexpr int64_t k_blocks = 16;
  static constexpr uint64_t k_slots = 8;

  void SetUp() override {
    if (GetParam() == k_faulty_sim) {
      auto f = faulty_copy_engine::make(std::make_unique<sim_copy_engine>(), fault_plan{});
      ASSERT_TRUE(f.ok()) << f.error().to_string();
      engine_ = std::move(f).value();
      return;
    }
    auto e = make_copy_engine({.backend = GetParam(), .device = 0});
    if (e.code() == errc::device_unavailable) {
      if (gpu_required()) {
        FAIL() << "KVC_REQUIRE_GPU=1 but backend \"" << GetParam()
               << "\" cannot run here: " << e.error().to_string();
      }
      GTEST_SKIP() << "backend \"" << GetParam() << "\" cannot run here (KVC_REQUIRE_GPU=1 makes "
                   << "this a failure): " << e.error().to_string();
    }
    ASSERT_TRUE(e.ok()) << e.error().to_string();
    engine_ = std::move(e).value();
  }

  /// Submits with no_dependency: no device work touches the test's memory (the cuda backend
  /// refuses a submit that names no ordering).
  result<transfer_id> submit(direction dir, std::span<const copy_op> ops) {
    return engine_->submit(dir, ops, {.no_dependency = true});
  }

  /// A pool of `bytes` registered with the engine (the cuda backend copies only from and to
  /// registered host memory).
  host_pool& registered_pool(size_t bytes) {
    pool_ = std::make_unique<host_pool>(bytes);
    EXPECT_TRUE(engine_->register_host(pool_->data, pool_->bytes).ok());
    return *pool_;
  }

  /// Three GPU tensors: a FlashAttention layer (2, nb, 2, 2, 4) fp16 -> K and V regions of 32 B,
  /// and a plain layer (nb, 3, 8) int8 -> one region of 24 B; filled with a known pattern.
  void make_kv(uint32_t factor) {
    factor_ = factor;
    std::vector<kv_tensor_desc> descs;
    auto add = [&](std::vector<int64_t> shape, uint64_t elem, int block_dim) {
      std::vector<int64_t> strides(shape.size());
      int64_t s = static_cast<int64_t>(elem);
      for (size_t i = shape.size(); i-- > 0;) {
        strides[i] = s;
        s *= shape[i];
      }
      auto buf = engine_->allocate_device(static_cast<size_t>(s));
      ASSERT_TRUE(buf.ok()) << buf.error().to_string();
      tensors_.push_back(*buf);
      descs.push_back({reinterpret_cast<uintptr_t>(buf->data), shape, strides, elem, block_dim});
    };
    add({2, k_blocks, 2, 2, 4}, 2, 1);
    add({k_blocks, 3, 8}, 1, 0);
    if (testing::Test::HasFatalFailure()) return;
    auto layout = kv_layout::from_tensors(descs);
    ASSERT_TRUE(layout.ok()) << layout.error().to_string();
    layout_ = std::make_unique<kv_layout>(*layout);
    ASSERT_EQ(layout_->regions().size(), 3u);

    slot_stride_ = (layout_->bytes_per_slot(factor) + 63) / 64 * 64;
    pool_ = std::make_unique<host_pool>(slot_stride_ * k_slots);
    ASSERT_TRUE(engine_->register_host(pool_->data, pool_->bytes, slot_stride_).ok());
    for (size_t t = 0; t < tensors_.size(); ++t) {
      std::vector<uint8_t> host(tensors_[t].bytes);
      for (size_t o = 0; o < host.size(); ++o) host[o] = pattern(t, o);
      ASSERT_TRUE(engine_->upload(tensors_[t].data, host.data(), host.size()).ok());
    }
    original_ = download_pages();
  }

  /// Page bytes of every (block, region) as seen in device memory now.
  std::map<std::pair<int64_t, size_t>, std::vector<std::byte>> download_pages() {
    std::map<std::pair<int64_t, size_t>, std::vector<std::byte>> pages;
    for (int64_t b = 0; b < k_blocks; ++b) {
      for (size_t i = 0; i < layout_->regions().size(); ++i) {
        const kv_region& r = layout_->regions()[i];
        std::vector<std::byte> page(r.page_bytes);
        EXPECT_TRUE(engine_
                        ->download(page.data(),
                                   reinterpret_cast<void*>(r.base + b * r.block_stride),
                                   page.size())
                        .ok());
        pages[{b, i}] = std::move(page);
      }
    }
    return pages;
  }

  void zero_device() {
    for (const device_buffer& t : tensors_) {
      std::vector<std::byte> zeros(t.bytes);
      ASSERT_TRUE(engine_->upload(t.data, zeros.data(), zeros.size()).ok());
    }
  }

  kv_transfer_spec spec(direction dir, const std::vector<int64_t>& slots,
                        const std::vector<int64_t>& blocks, uint64_t block_index = 0) {
    kv_transfer_spec s;
    s.dir = dir;
    s.block_size_factor = factor_;
    s.cpu = {reinterpret_cast<uintptr_t>(pool_->data), slot_stride_, k_slots};
    s.cpu_slot_ids = slots;
    s.gpu_block_ids = blocks;
    s.block_index = block_index;
    return s;
  }

  /// Submits the transfer built from `s`, waits for it and checks its report.
  void run_transfer(const kv_transfer_spec& s) {
    auto ops = layout_->build_ops(s);
    ASSERT_TRUE(ops.ok()) << ops.error().to_string();
    auto id = submit(s.dir, *ops);
    ASSERT_TRUE(id.ok()) << id.error().to_string();
    ASSERT_TRUE(engine_->wait(std::span<const transfer_id>(&*id, 1)).ok());
    EXPECT_EQ(engine_->poll(*id), poll_state::done);
    auto reports = engine_->take_finished();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].id, *id);
    EXPECT_TRUE(reports[0].ok);
    EXPECT_EQ(reports[0].dir, s.dir);
    EXPECT_EQ(reports[0].bytes, s.gpu_block_ids.size() * layout_->gpu_block_bytes());
    EXPECT_GE(reports[0].seconds, 0.0);
  }

  /// Checksum of the CPU copy of (slot, sub-block, region).
  uint64_t cpu_page_sum(int64_t slot, uint32_t sub, size_t region) const {
    const std::byte* p = pool_->data + slot * slot_stride_ + sub * layout_->gpu_block_bytes() +
                         layout_->region_offset(region);
    return checksum(p, layout_->regions()[region].page_bytes);
  }
  uint64_t original_sum(int64_t block, size_t region) const {
    const auto& page = original_.at({block, region});
    return checksum(page.data(), page.size());
  }

  // Declared before engine_: destroyed after it, since the engine unregisters the pool.
  std::unique_ptr<host_pool> pool_;
  std::unique_ptr<copy_engine> engine_;
  std::vector<device_buffer> tensors_;
  std::unique_ptr<kv_layout> layout_;
  std::map<std::pair<int64_t, size_t>, std::vector<std::byte>> original_;
  uint32_t factor_ = 1;
  uint64_t slot_stride_ = 0;
};

TEST_P(CopyEngineContract, StoreThenLoadRestoresExactBytes) {
  make_kv(/*factor=*/2);
  ASSERT_FALSE(HasFatalFailure());
  const size_t regions = layout_->regions().size();
  run_transfer(spec(direction::gpu_to_cpu, {5, 1}, {3, 4, 9, 10}));
  // The documented packing: slot 5 holds GPU blocks 3, 4; slot 1 holds 9, 10.
  for (size_t i = 0; i < regions; ++i) {
    EXPECT_EQ(cpu_page_sum(5, 0, i), original_sum(3, i));
    EXPECT_EQ(cpu_page_sum(5, 1, i), original_sum(4, i));
    EXPECT_EQ(cpu_page_sum(1, 0, i), original_sum(9, i));
    EXPECT_EQ(cpu_page_sum(1, 1, i), original_sum(10, i));
  }
  zero_device();
  run_transfer(spec(direction::cpu_to_gpu, {1, 5}, {12, 13, 0, 1}));
  const auto now = download_pages();
  const std::map<int64_t, int64_t> restored{{12, 9}, {13, 10}, {0, 3}, {1, 4}};
  for (int64_t b = 0; b < k_blocks; ++b) {
    for (size_t i = 0; i < regions; ++i) {
      const auto& page = now.at({b, i});
      auto it = restored.find(b);
      if (it != restored.end()) {
        EXPECT_EQ(checksum(page.data(), page.size()), original_sum(it->second, i))
            << "block " << b << " region " << i;
      } else {
        EXPECT_TRUE(
            std::all_of(page.begin(), page.end(), [](std::byte x) { return x == std::byte{0}; }))
            << "block " << b << " region " << i << " was written but not loaded";
      }
    }
  }
}

TEST_P(CopyEngineContract, PartialFirstBlocksSkipSubBlocks) {
  make_kv(/*factor=*/3);
  ASSERT_FALSE(HasFatalFailure());
  const size_t regions = layout_->regions().size();
  // A store whose first GPU block is null: block_index 1 leaves sub-block 0 of slot 2 untouched.
  run_transfer(spec(direction::gpu_to_cpu, {2}, {1, 2}, /*block_index=*/1));
  const std::byte* sub0 = pool_->data + 2 * slot_stride_;
  EXPECT_TRUE(std::all_of(sub0, sub0 + layout_->gpu_block_bytes(),
                          [](std::byte x) { return x == std::byte{0xEE}; }));
  for (size_t i = 0; i < regions; ++i) {
    EXPECT_EQ(cpu_page_sum(2, 1, i), original_sum(1, i));
    EXPECT_EQ(cpu_page_sum(2, 2, i), original_sum(2, i));
  }
  run_transfer(spec(direction::gpu_to_cpu, {0, 1}, {0, 1, 2, 3, 4, 5}));
  zero_device();
  // A load starting inside offloaded block 1 (GPU index 4): skips 4 % 3 = 1 sub-block of slot 0.
  run_transfer(spec(direction::cpu_to_gpu, {0, 1}, {7, 8, 9, 10, 11}, /*block_index=*/4));
  const auto now = download_pages();
  const std::map<int64_t, int64_t> restored{{7, 1}, {8, 2}, {9, 3}, {10, 4}, {11, 5}};
  for (int64_t b = 0; b < k_blocks; ++b) {
    for (size_t i = 0; i < regions; ++i) {
      const auto& page = now.at({b, i});
      auto it = restored.find(b);
      if (it != restored.end()) {
        EXPECT_EQ(checksum(page.data(), page.size()), original_sum(it->second, i))
            << "block " << b << " region " << i;
      } else {
        EXPECT_TRUE(
            std::all_of(page.begin(), page.end(), [](std::byte x) { return x == std::byte{0}; }))
            << "block " << b << " region " << i;
      }
    }
  }
}

TEST_P(CopyEngineContract, CompletesFifoPerDirection) {
  constexpr size_t k_each = 24, k_chunk = 256;
  auto dev = engine_->allocate_device(2 * k_each * k_chunk);
  ASSERT_TRUE(dev.ok());
  host_pool& pool = registered_pool(2 * k_each * k_chunk);
  auto* gpu = static_cast<std::byte*>(dev->data);
  std::map<direction, std::vector<transfer_id>> submitted;
  for (size_t k = 0; k < k_each; ++k) {
    // Stores read the first half of GPU memory into the first half of the pool; loads write the
    // second half of GPU memory from the second half of the pool: no transfer races another.
    copy_op store{gpu + k * k_chunk, pool.data + k * k_chunk, k_chunk};
    copy_op load{pool.data + (k_each + k) * k_chunk, gpu + (k_each + k) * k_chunk, k_chunk};
    auto s = submit(direction::gpu_to_cpu, std::span(&store, 1));
    auto l = submit(direction::cpu_to_gpu, std::span(&load, 1));
    ASSERT_TRUE(s.ok() && l.ok());
    submitted[direction::gpu_to_cpu].push_back(*s);
    submitted[direction::cpu_to_gpu].push_back(*l);
  }
  // Polled newest first: once one is done, every older one of its direction must be done.
  for (auto& [dir, ids] : submitted) {
    bool seen_done = false;
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      const poll_state st = engine_->poll(*it);
      ASSERT_NE(st, poll_state::unknown);
      ASSERT_NE(st, poll_state::failed);
      if (seen_done) {
        EXPECT_EQ(st, poll_state::done) << "transfer " << *it << " overtaken";
      }
      seen_done = seen_done || st == poll_state::done;
    }
  }
  std::vector<transfer_id> all;
  for (auto& [dir, ids] : submitted) all.insert(all.end(), ids.begin(), ids.end());
  ASSERT_TRUE(engine_->wait(all).ok());
  std::map<direction, std::vector<transfer_id>> finished;
  for (const transfer_report& r : engine_->take_finished()) {
    EXPECT_TRUE(r.ok);
    EXPECT_EQ(r.bytes, k_chunk);
    finished[r.dir].push_back(r.id);
  }
  EXPECT_EQ(finished, submitted);
  EXPECT_TRUE(engine_->take_finished().empty()) << "a report was handed out twice";
}

TEST_P(CopyEngineContract, InvalidOpsFailAtSubmitAndChangeNothing) {
  auto dev = engine_->allocate_device(4096);
  ASSERT_TRUE(dev.ok());
  host_pool& pool = registered_pool(4096);
  auto* gpu = static_cast<std::byte*>(dev->data);
  const std::vector<std::vector<copy_op>> bad = {
      {{nullptr, pool.data, 64}},                                 // null source
      {{gpu, nullptr, 64}},                                       // null destination
      {{gpu, pool.data, 0}},                                      // zero bytes
      {{gpu, pool.data, 128}, {gpu + 128, pool.data + 64, 128}},  // overlapping dsts
      {{pool.data, gpu, 64}},                                     // a load submitted as a store
  };
  for (size_t k = 0; k < bad.size(); ++k) {
    auto id = submit(direction::gpu_to_cpu, bad[k]);
    ASSERT_FALSE(id.ok()) << "bad op list " << k << " was accepted";
    EXPECT_EQ(id.code(), errc::invalid_argument) << id.error().to_string();
    EXPECT_FALSE(id.error().message().empty());
  }
  EXPECT_TRUE(std::all_of(pool.data, pool.data + pool.bytes,
                          [](std::byte x) { return x == std::byte{0xEE}; }));
  EXPECT_TRUE(engine_->take_finished().empty());
  // The engine still works.
  copy_op ok{gpu, pool.data, 64};
  auto id = submit(direction::gpu_to_cpu, std::span(&ok, 1));
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].id, *id);
}

TEST_P(CopyEngineContract, WaitsOnSeveralIds) {
  auto dev = engine_->allocate_device(8 * 512);
  ASSERT_TRUE(dev.ok());
  host_pool& pool = registered_pool(8 * 512);
  std::vector<uint8_t> src(512);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  auto* gpu = static_cast<std::byte*>(dev->data);
  for (int k = 0; k < 4; ++k) ASSERT_TRUE(engine_->upload(gpu + k * 512, src.data(), 512).ok());
  std::vector<transfer_id> ids;
  for (int k = 0; k < 4; ++k) {
    copy_op store{gpu + k * 512, pool.data + k * 512, 512};
    auto id = submit(direction::gpu_to_cpu, std::span(&store, 1));
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  copy_op load{pool.data + 7 * 512, gpu + 7 * 512, 512};
  auto l = submit(direction::cpu_to_gpu, std::span(&load, 1));
  ASSERT_TRUE(l.ok());
  ids.push_back(*l);
  ASSERT_TRUE(engine_->wait(ids).ok());
  for (transfer_id id : ids) EXPECT_EQ(engine_->poll(id), poll_state::done);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(std::memcmp(pool.data + k * 512, src.data(), 512), 0) << "store " << k;
  }
  EXPECT_EQ(engine_->take_finished().size(), ids.size());
}

TEST_P(CopyEngineContract, UnknownIdsArePolledUnknownAndWaitedNotFound) {
  EXPECT_EQ(engine_->poll(987654321), poll_state::unknown);
  auto none = submit(direction::cpu_to_gpu, {});
  ASSERT_TRUE(none.ok());
  const std::vector<transfer_id> ids{*none, 987654321};
  status s = engine_->wait(ids);
  EXPECT_EQ(s.code(), errc::not_found) << s.to_string();
  EXPECT_EQ(engine_->poll(*none), poll_state::done) << "the known id is waited for anyway";
  ASSERT_EQ(engine_->take_finished().size(), 1u);
  // Taken reports are forgotten.
  EXPECT_EQ(engine_->poll(*none), poll_state::unknown);
  EXPECT_EQ(engine_->wait(std::span(&*none, 1)).code(), errc::not_found);
}

TEST_P(CopyEngineContract, EmptyTransferCompletesInOrder) {
  auto dev = engine_->allocate_device(1 << 16);
  ASSERT_TRUE(dev.ok());
  host_pool& pool = registered_pool(1 << 16);
  copy_op big{dev->data, pool.data, 1 << 16};
  auto first = submit(direction::gpu_to_cpu, std::span(&big, 1));
  auto empty = submit(direction::gpu_to_cpu, {});
  ASSERT_TRUE(first.ok() && empty.ok());
  EXPECT_NE(*first, *empty);
  ASSERT_TRUE(engine_->wait(std::span(&*empty, 1)).ok());
  EXPECT_EQ(engine_->poll(*first), poll_state::done) << "FIFO: the empty transfer came second";
  auto reports = engine_->take_finished();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].id, *first);
  EXPECT_EQ(reports[1].id, *empty);
  EXPECT_TRUE(reports[1].ok);
  EXPECT_EQ(reports[1].bytes, 0u);
}

TEST_P(CopyEngineContract, RegisterDeviceTakesEngineMemoryOrAdoptsHostMemoryOnHostBackends) {
  auto dev = engine_->allocate_device(4096);
  ASSERT_TRUE(dev.ok());
  auto* gpu = static_cast<std::byte*>(dev->data);
  // A KV tensor carved out of device memory is accepted, and ops may then touch it.
  EXPECT_TRUE(engine_->register_device(gpu + 1024, 1024).ok());
  EXPECT_EQ(engine_->register_device(nullptr, 64).code(), errc::invalid_argument);
  EXPECT_EQ(engine_->register_device(gpu, 0).code(), errc::invalid_argument);
  host_pool other(4096);
  const status host = engine_->register_device(other.data, 2048);
  if (engine_->name().find("cuda") != std::string_view::npos) {
    // Host memory is no device memory of the GPU.
    EXPECT_EQ(host.code(), errc::invalid_argument) << host.to_string();
    return;
  }
  // The host backends adopt it (a CPU tensor standing in for GPU memory): ops may use it as
  // their GPU side; a range overlapping it only in part is refused.
  ASSERT_TRUE(host.ok()) << host.to_string();
  EXPECT_TRUE(engine_->register_device(other.data + 512, 512).ok());  // inside: a tensor of it
  EXPECT_EQ(engine_->register_device(other.data + 1024, 2048).code(), errc::invalid_argument);
  host_pool& pool = registered_pool(2048);
  std::memset(other.data, 0x5A, 2048);
  copy_op op{other.data, pool.data, 2048};
  auto id = submit(direction::gpu_to_cpu, std::span(&op, 1));
  ASSERT_TRUE(id.ok()) << id.error().to_string();
  ASSERT_TRUE(engine_->wait(std::span(&*id, 1)).ok());
  EXPECT_EQ(std::memcmp(pool.data, other.data, 2048), 0);
  engine_.reset();  // the engine ends before the adopted memory is freed
}

TEST_P(CopyEngineContract, RegisterHostRefusesOverlapsAndEmptyRanges) {
  host_pool pool(8192);
  ASSERT_TRUE(engine_->register_host(pool.data, 4096, /*slot_stride=*/512).ok());
  EXPECT_EQ(engine_->register_host(pool.data + 2048, 4096).code(), errc::invalid_argument);
  EXPECT_EQ(engine_->register_host(pool.data + 4096, 0).code(), errc::invalid_argument);
  EXPECT_EQ(engine_->register_host(nullptr, 4096).code(), errc::invalid_argument);
  EXPECT_TRUE(engine_->register_host(pool.data + 4096, 4096).ok());
  engine_.reset();  // unregisters before the pool is freed
}

INSTANTIATE_TEST_SUITE_P(Backends, CopyEngineContract, testing::ValuesIn(engine_kinds()),
                         param_name);

TEST(EngineFactoryTest, SimIsAlwaysBuiltAndNamed) {
  const auto backends = built_backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front(), "sim");
  auto e = make_copy_engine({});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->name(), "sim");
}

TEST(EngineFactoryTest, RejectsUnknownBackendAndBadDevice) {
  auto unknown = make_copy_engine({.backend = "rdma"});
  EXPECT_EQ(unknown.code(), errc::invalid_argument);
  EXPECT_NE(unknown.error().message().find("rdma"), std::string::npos);
  EXPECT_EQ(make_copy_engine({.backend = "sim", .device = -1}).code(), errc::invalid_argument);
}

TEST(EngineFactoryTest, CudaEitherWorksOrSaysWhyNot) {
  auto e = make_copy_engine({.backend = "cuda"});
  const auto backends = built_backends();
  const bool built = std::count(backends.begin(), backends.end(), "cuda") == 1;
  if (e.ok()) {
    EXPECT_TRUE(built);
    EXPECT_EQ((*e)->name(), "cuda");
  } else {
    EXPECT_EQ(e.code(), errc::device_unavailable) << e.error().to_string();
    EXPECT_NE(e.error().message().find(built ? "cuda copy engine" : "not built"), std::string::npos)
        << e.error().message();
  }
}

}  // namespace
}  // namespace kvc::cuda
