// tier_executor: a rank's file tier jobs over a real file store in a scratch directory under
// /tmp and a heap buffer standing in for the rank's region of the pool. Every wait is
// wait_all (explicit: it returns once every submitted I/O completed).
#include "actors/worker/tier_executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/worker/file_tier_io.hpp"
#include "tests/disk/scratch_dirs.hpp"
#include "tests/worker/gated_tier_io.hpp"

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
    seam_.emplace(*io_);
    pool_.assign(kSlots * kSlot, std::byte{0});
    exec_ = std::make_unique<tier_executor>(
        *seam_, cpu_pool_region{.base = pool_.data(), .slot_stride = kSlot, .num_slots = kSlots},
        kSlot);
  }

  std::byte* slot(cpu_slot s) { return pool_.data() + s * kSlot; }
  void fill(cpu_slot s, uint8_t v) { std::memset(slot(s), v, kSlot); }

  /// Starts `jobs` (and removals) as one step's metadata, waits, returns the results.
  std::vector<rank_job_result> run(std::vector<tier_job> jobs,
                                   std::vector<block_key> removed = {}) {
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
  std::optional<file_tier_io> seam_;
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
      *seam_, cpu_pool_region{.base = pool_.data(), .slot_stride = kSlot, .num_slots = kSlots},
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

/// The flush and the per-block order of removals and cascades, over gated_tier_io: nothing
/// runs until the test says so, and every request submitted while an earlier one is
/// outstanding on the same slot or file is recorded as a conflict.
class TierFlushTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    auto store = disk::file_store::open({.root_dir = dir_.path(),
                                         .run_description = "tier flush test",
                                         .rank = 1,
                                         .payload_bytes = kSlot});
    ASSERT_TRUE(store.ok()) << store.error().to_string();
    io_ = std::make_unique<testing::gated_tier_io>(std::move(*store));
    pool_.assign(kSlots * kSlot, std::byte{0});
    exec_ = std::make_unique<tier_executor>(
        *io_, cpu_pool_region{.base = pool_.data(), .slot_stride = kSlot, .num_slots = kSlots},
        kSlot);
  }

  std::byte* slot(cpu_slot s) { return pool_.data() + s * kSlot; }
  /// Whether every byte of slot s is v.
  bool holds(cpu_slot s, uint8_t v) {
    return std::all_of(slot(s), slot(s) + kSlot,
                       [v](std::byte b) { return std::to_integer<uint8_t>(b) == v; });
  }
  /// Writes block k's file on this rank, every byte v.
  void file_of(const block_key& k, uint8_t v) {
    const std::vector<char> bytes(kSlot, static_cast<char>(v));
    ASSERT_TRUE(io_->store().write(k, bytes).ok());
  }
  void start(std::vector<tier_job> jobs, std::vector<job_id> flush = {},
             std::vector<block_key> removed = {}) {
    connector_metadata meta;
    meta.tier_jobs = std::move(jobs);
    meta.flush = std::move(flush);
    meta.tier_removed = std::move(removed);
    exec_->start(meta);
  }
  rank_job_result only_result() {
    auto done = exec_->take_finished();
    EXPECT_EQ(done.size(), 1u);
    return done.empty() ? rank_job_result{} : done[0];
  }

  disk::testing::scratch_dir dir_{"/tmp"};
  std::unique_ptr<testing::gated_tier_io> io_;
  std::vector<std::byte> pool_;
  std::unique_ptr<tier_executor> exec_;
  const block_key k1_ = block_key::from_index(1);
  const block_key k2_ = block_key::from_index(2);
};

TEST_F(TierFlushTest, AFlushedPromotionsRunningReadEndsBeforeTheStepReusesItsSlot) {
  file_of(k1_, 0xA1);
  file_of(k2_, 0xB2);
  // Step 1: promotion 1 reads k1 into slot 2; an I/O thread has taken it and is reading.
  start({{.id = 1, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k1_}}});
  io_->begin_queued();
  // Rank 0 failed promotion 1, which freed slot 2: step 2 flushes it and promotes k2 there.
  start({{.id = 2, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k2_}}}, {1});
  EXPECT_EQ(io_->conflicts(), std::vector<std::string>{});
  EXPECT_EQ(io_->done_log(), std::vector<std::string>{"read 1"});  // ended inside start()
  const rank_job_result first = only_result();
  EXPECT_EQ(first.job, 1u);
  EXPECT_TRUE(first.ok) << first.detail;  // it ran here; the coordinator absorbs it
  // Step 2's read runs; anything late would land now, after it.
  io_->run_queued();
  io_->run_all();
  const rank_job_result second = only_result();
  EXPECT_EQ(second.job, 2u);
  EXPECT_TRUE(second.ok) << second.detail;
  EXPECT_TRUE(holds(2, 0xB2));  // k2's bytes, byte for byte
  EXPECT_EQ(exec_->jobs_in_flight(), 0u);
}

TEST_F(TierFlushTest, AFlushedJobsQueuedIoIsCancelledAndNeverTouchesItsSlots) {
  file_of(k1_, 0xA1);
  file_of(k2_, 0xB2);
  std::memset(slot(0), 0x0C, kSlot);
  // Step 1: a cascade of slot 0 and a promotion into slot 2, both still queued.
  start(
      {{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {block_key::from_index(7)}},
       {.id = 2, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k1_}}});
  // Both failed on rank 0: step 2 flushes them and reuses their slots.
  std::memset(slot(0), 0x0D, kSlot);  // a store wrote slot 0 for another block
  start({{.id = 3, .kind = transfer_kind::promotion, .slots = {2}, .keys = {k2_}}}, {1, 2});
  EXPECT_EQ(io_->conflicts(), std::vector<std::string>{});
  auto done = exec_->take_finished();
  ASSERT_EQ(done.size(), 2u);
  for (const rank_job_result& r : done) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, errc::precondition_failed);
    EXPECT_NE(r.detail.find("cancelled by the flush"), std::string::npos) << r.detail;
  }
  EXPECT_EQ(exec_->stats().blocks_cancelled, 2u);
  io_->run_all();
  EXPECT_EQ(io_->done_log(), std::vector<std::string>{"read 2"});  // only step 2's I/O ran
  EXPECT_TRUE(only_result().ok);
  EXPECT_TRUE(holds(2, 0xB2));
  EXPECT_EQ(io_->store().check(block_key::from_index(7)).code(), errc::not_found);
}

TEST_F(TierFlushTest, ACascadeWaitsForTheRemovalOfItsBlockWithoutBlockingTheStep) {
  std::memset(slot(0), 0x5A, kSlot);
  file_of(k1_, 0x11);  // the block's old file, evicted
  // One step removes k1's old file and cascades k1 again: the write is held, the step goes on.
  start({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}}}, {}, {k1_});
  EXPECT_EQ(io_->conflicts(), std::vector<std::string>{});
  EXPECT_EQ(io_->outstanding(), 1u);  // the removal only
  // A removal of k2 still queued from this step, then k2's cascade in the next one.
  start({}, {}, {k2_});
  start({{.id = 2, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k2_}}});
  EXPECT_EQ(io_->conflicts(), std::vector<std::string>{});
  EXPECT_TRUE(exec_->take_finished().empty());
  io_->run_all();                               // the removals
  EXPECT_TRUE(exec_->take_finished().empty());  // sees them end: the writes go out
  io_->run_all();
  EXPECT_EQ(io_->done_log(),
            (std::vector<std::string>{"remove 1", "remove 2", "write 1", "write 2"}));
  auto done = exec_->take_finished();
  ASSERT_EQ(done.size(), 2u);
  EXPECT_TRUE(done[0].ok && done[1].ok);
  std::vector<char> back(kSlot);
  ASSERT_TRUE(io_->store().read(k1_, back).ok());  // the new file survived its removal
  EXPECT_EQ(back, std::vector<char>(kSlot, 0x5A));
  EXPECT_EQ(exec_->stats().removals, 2u);
}

TEST_F(TierFlushTest, AFlushedCascadeHeldBehindARemovalIsWithdrawnAndWaitAllEnds) {
  std::memset(slot(0), 0x5A, kSlot);
  start({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}}}, {}, {k1_});
  start({}, {1});  // failed elsewhere: its held write never goes out
  const rank_job_result r = only_result();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(exec_->stats().blocks_cancelled, 1u);
  exec_->wait_all();  // the removal
  EXPECT_EQ(io_->done_log(), std::vector<std::string>{"remove 1"});
  EXPECT_EQ(io_->outstanding(), 0u);
  EXPECT_TRUE(exec_->take_finished().empty());
}

TEST_F(TierFlushTest, JobsNotAllowedFailWithTheReasonWhileTheFlushAndRemovalsRun) {
  std::memset(slot(0), 0x5A, kSlot);
  file_of(k2_, 0xB2);
  start({{.id = 1, .kind = transfer_kind::cascade, .slots = {0}, .keys = {k1_}}});
  connector_metadata meta;
  meta.flush = {1};
  meta.tier_removed = {k2_};
  meta.tier_jobs = {{.id = 2, .kind = transfer_kind::promotion, .slots = {0}, .keys = {k1_}}};
  exec_->start(meta, make_error(errc::timeout, "a flushed store is still copying"));
  auto done = exec_->take_finished();
  ASSERT_EQ(done.size(), 2u);  // the flushed cascade (cancelled) and the refused promotion
  EXPECT_EQ(done[0].job, 1u);
  EXPECT_EQ(done[0].error, errc::precondition_failed);
  EXPECT_EQ(done[1].job, 2u);
  EXPECT_FALSE(done[1].ok);
  EXPECT_EQ(done[1].error, errc::timeout);
  EXPECT_EQ(done[1].detail, "not started: a flushed store is still copying");
  exec_->wait_all();  // the removal, and no read of the refused promotion
  EXPECT_EQ(io_->done_log(), std::vector<std::string>{"remove 2"});
  EXPECT_TRUE(holds(0, 0x5A));
  EXPECT_EQ(exec_->jobs_in_flight(), 0u);
}

}  // namespace
}  // namespace kvc::worker
