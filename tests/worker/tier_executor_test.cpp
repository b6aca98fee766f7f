// tier_executor: a rank's file tier jobs over a real file store in a scratch directory under
// /tmp and a heap buffer standing in for the rank's region of the pool. Every wait is
// wait_all (explicit: it returns once every submitted I/O completed).
#include "actors/worker/tier_executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/disk/scratch_dirs.hpp"

namespace kvc::worker {
namespace {

constexpr uint64_t kSlot = 64;
constexpr uint32_t kSlots = 4;

class TierExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto store = disk::file_store::open({.root_dir = dir_.path(),
                                         .run_description = "tier executor test",
                                         .rank = 0,
                                         .payload_bytes = kSlot});
    ASSERT_TRUE(store.ok()) << store.error().to_string();
    auto io = disk::file_io::create(std::move(*store), 1, 1);
    ASSERT_TRUE(io.ok()) << io.error().to_string();
    io_ = std::move(*io);
    pool_.assign(kSlots * kSlot, std::byte{0});
    exec_ = std::make_unique<tier_executor>(
        *io_, cpu_pool_region{.base = pool_.data(), .slot_stride = kSlot, .num_slots = kSlots},
        kSlot);
  }

  std::byte* slot(cpu_slot s) { return pool_.data() + s * kSlot; }
  void fill(cpu_slot s, uint8_t v) { std::memset(slot(s), v, kSlot); }

  /// Starts `jobs` (and removals) as one step's metadata, waits, returns the results.
  std::vector<job_result> run(std::vector<tier_job> jobs, std::vector<block_key> removed = {}) {
    connector_metadata meta;
    meta.tier_jobs = std::move(jobs);
    meta.tier_removed = std::move(removed);
    exec_->start(meta);
    exec_->wait_all();
    EXPECT_EQ(exec_->jobs_in_flight(), 0u);
    return exec_->take_finished();
  }

  disk::testing::scratch_dir dir_{"/tmp"};
  std::unique_ptr<disk::file_io> io_;
  std::vector<std::byte> pool_;
  std::unique_ptr<tier_executor> exec_;
  const block_key k1_ = block_key::from_index(1);
  const block_key k2_ = block_key::from_index(2);
};

TEST_F(TierExecutorTest, ACascadeWritesSlotsAndAPromotionReadsThemBack) {
  fill(0, 0x11);
  fill(1, 0x22);
  auto done = run({{.id = 7, .kind = transfer_kind::cascade, .slots = {0, 1}, .keys = {k1_, k2_}}});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].job, 7u);
  EXPECT_EQ(done[0].kind, transfer_kind::cascade);
  EXPECT_TRUE(done[0].ok) << done[0].detail;
  EXPECT_EQ(done[0].bytes, 2 * kSlot);

  done = run({{.id = 8, .kind = transfer_kind::promotion, .slots = {3, 2}, .keys = {k1_, k2_}}});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].ok) << done[0].detail;
  EXPECT_EQ(std::memcmp(slot(3), slot(0), kSlot), 0);
  EXPECT_EQ(std::memcmp(slot(2), slot(1), kSlot), 0);
  EXPECT_EQ(exec_->stats().bytes_written, 2 * kSlot);
  EXPECT_EQ(exec_->stats().bytes_read, 2 * kSlot);
}

TEST_F(TierExecutorTest, AJobWithOneMissingFileFailsWithTheReason) {
  fill(0, 0x33);
  ASSERT_TRUE(run({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}}})[0].ok);
  auto done =
      run({{.id = 2, .kind = transfer_kind::check, .slots = {}, .keys = {k1_}},
           {.id = 3, .kind = transfer_kind::check, .slots = {}, .keys = {k2_}},
           {.id = 4, .kind = transfer_kind::promotion, .slots = {1, 2}, .keys = {k1_, k2_}}});
  ASSERT_EQ(done.size(), 3u);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.job < b.job; });
  EXPECT_TRUE(done[0].ok);
  EXPECT_FALSE(done[1].ok);
  EXPECT_EQ(done[1].error, errc::not_found);
  EXPECT_FALSE(done[2].ok);
  EXPECT_EQ(done[2].error, errc::not_found);
  EXPECT_FALSE(done[2].detail.empty());
  EXPECT_EQ(done[2].bytes, 0u);  // a failed job moved nothing usable
  EXPECT_EQ(exec_->stats().blocks_failed, 2u);
}

TEST_F(TierExecutorTest, RemovedFilesAreGoneAndCounted) {
  ASSERT_TRUE(run({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}}})[0].ok);
  EXPECT_TRUE(run({}, {k1_, k2_}).empty());  // a missing file's removal is fine
  EXPECT_EQ(exec_->stats().removals, 2u);
  EXPECT_FALSE(run({{.id = 2, .kind = transfer_kind::check, .slots = {}, .keys = {k1_}}})[0].ok);
}

TEST_F(TierExecutorTest, ABadJobFailsAtOnceAndTheOthersRun) {
  connector_metadata meta;
  meta.tier_jobs = {{.id = 1, .kind = transfer_kind::cascade, .slots = {kSlots}, .keys = {k1_}},
                    {.id = 2, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_, k2_}},
                    {.id = 3, .kind = transfer_kind::cascade, .slots = {1}, .keys = {k2_}},
                    {.id = 3, .kind = transfer_kind::check, .slots = {}, .keys = {k2_}}};
  exec_->start(meta);
  exec_->wait_all();
  auto done = exec_->take_finished();
  ASSERT_EQ(done.size(), 4u);
  std::stable_sort(done.begin(), done.end(),
                   [](const auto& a, const auto& b) { return a.job < b.job; });
  EXPECT_EQ(done[0].error, errc::invalid_argument);  // slot outside the region
  EXPECT_EQ(done[1].error, errc::invalid_argument);  // a slot short
  EXPECT_EQ(done[2].error, errc::invalid_argument);  // id 3 in flight already
  EXPECT_TRUE(done[3].ok);                           // the first job 3 ran
  EXPECT_TRUE(exec_->take_finished().empty());       // each reported once
}

TEST_F(TierExecutorTest, AnInjectedFailIoFailsTheJobWithoutDoingItsIo) {
  fault_config faults{.seed = 5};
  fault_spec write0{.kind = fault_kind::fail_io, .op = fault_io_op::write,
                    .trigger = fault_trigger::nth, .nth = 1};
  fault_spec read0{.kind = fault_kind::fail_io, .op = fault_io_op::read,
                   .trigger = fault_trigger::nth, .nth = 0};
  faults.specs = {write0, read0};
  auto decider = tier_fault_decider::make(faults, 0);
  ASSERT_TRUE(decider.ok()) << decider.error().to_string();
  exec_ = std::make_unique<tier_executor>(
      *io_, cpu_pool_region{.base = pool_.data(), .slot_stride = kSlot, .num_slots = kSlots},
      kSlot, std::move(*decider));
  fill(0, 0x44);
  fill(1, 0x55);
  // Cascade #0 runs, cascade #1 is failed by the fault: its block's file is never written.
  auto done = run({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}},
                   {.id = 2, .kind = transfer_kind::cascade, .slots = {1}, .keys = {k2_}}});
  ASSERT_EQ(done.size(), 2u);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.job < b.job; });
  EXPECT_TRUE(done[0].ok) << done[0].detail;
  EXPECT_FALSE(done[1].ok);
  EXPECT_EQ(done[1].error, errc::injected_fault);
  EXPECT_NE(done[1].detail.find("injected fail_io"), std::string::npos) << done[1].detail;
  EXPECT_EQ(done[1].bytes, 0u);
  EXPECT_EQ(exec_->injected_failures(), 1u);
  // Read #0 (this promotion) fails: its slot keeps its bytes, nothing was read into it.
  fill(2, 0x66);
  done = run({{.id = 3, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k1_}}});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, errc::injected_fault);
  EXPECT_EQ(std::to_integer<uint8_t>(*slot(2)), 0x66);
  EXPECT_EQ(exec_->stats().bytes_read, 0u);
  EXPECT_EQ(exec_->stats().blocks_failed, 0u);  // no block I/O failed: none was done
  // Read #1 and #2 run: k1's file is there and reads back, k2's was never written.
  done = run({{.id = 4, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k1_}},
              {.id = 5, .kind = transfer_kind::check, .slots = {}, .keys = {k2_}}});
  ASSERT_EQ(done.size(), 2u);
  std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) { return a.job < b.job; });
  EXPECT_TRUE(done[0].ok) << done[0].detail;
  EXPECT_EQ(std::memcmp(slot(2), slot(0), kSlot), 0);
  EXPECT_EQ(done[1].error, errc::not_found);
  EXPECT_EQ(exec_->injected_failures(), 2u);
}

}  // namespace
}  // namespace kvc::worker
