#include "actors/worker/transfer_executor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/faulty_copy_engine.hpp"
#include "cuda/sim_copy_engine.hpp"
#include "proto/fault_plan.hpp"

namespace kvc::worker {
namespace {

/// A step's metadata without flushed requests (the fields the tests set).
connector_metadata meta(step_id step, std::vector<transfer_job> loads = {},
                        std::vector<transfer_job> stores = {}, std::vector<job_id> flush = {}) {
  return {step, std::move(loads), std::move(stores), std::move(flush), {}, {}};
}


constexpr uint32_t k_blocks = 16;  // GPU blocks per layer (0 = null block)
constexpr uint64_t k_page = 64;    // bytes of one GPU block of one layer
constexpr uint32_t k_layers = 2;
constexpr uint32_t k_slots = 8;
constexpr uint64_t k_stride = 512;  // CPU slot stride; factor <= 4 fits (4 * 2 * 64)

/// One rank: a sim engine (optionally behind the faulty decorator), two per-layer KV tensors of
/// shape (k_blocks, k_page) in "GPU" memory, and a heap buffer standing in for the rank's region
/// of the shm pool. GPU block b of layer l holds bytes (l * 64 + b + i) & 0xff.
struct rank_fixture {
  explicit rank_fixture(uint32_t factor, fault_plan plan = {}) {
    auto sim_owner = std::make_unique<cuda::sim_copy_engine>();
    sim = sim_owner.get();
    if (plan.empty()) {
      engine = std::move(sim_owner);
    } else {
      auto f = cuda::faulty_copy_engine::make(std::move(sim_owner), std::move(plan));
      EXPECT_TRUE(f.ok()) << f.error().to_string();
      faulty = f->get();
      engine = std::move(f).value();
    }
    pool.resize(k_slots * k_stride);
    for (uint32_t l = 0; l < k_layers; ++l) {
      auto buf = engine->allocate_device(k_blocks * k_page);
      EXPECT_TRUE(buf.ok());
      layers.push_back(*buf);
      std::vector<std::byte> init(k_blocks * k_page);
      for (uint32_t b = 0; b < k_blocks; ++b) {
        for (uint64_t i = 0; i < k_page; ++i) init[b * k_page + i] = gpu_byte(l, b, i);
      }
      EXPECT_TRUE(engine->upload(buf->data, init.data(), init.size()).ok());
    }
    auto w =
        transfer_executor::create({/*rank=*/0, factor, {pool.data(), k_stride, k_slots}}, *engine);
    EXPECT_TRUE(w.ok()) << w.error().to_string();
    worker.emplace(std::move(w).value());
    std::vector<cuda::kv_tensor_desc> descs;
    for (const auto& l : layers) {
      descs.push_back({reinterpret_cast<uintptr_t>(l.data),
                       {k_blocks, int64_t{k_page}},
                       {int64_t{k_page}, 1},
                       1,
                       0});
    }
    EXPECT_TRUE(worker->register_kv_caches(descs).ok());
  }

  static std::byte gpu_byte(uint32_t layer, uint32_t block, uint64_t i) {
    return static_cast<std::byte>((layer * 64 + block + i) & 0xff);
  }

  std::vector<std::byte> gpu_page(uint32_t layer, uint32_t block) {
    std::vector<std::byte> out(k_page);
    auto* src = static_cast<std::byte*>(layers[layer].data) + block * k_page;
    EXPECT_TRUE(engine->download(out.data(), src, k_page).ok());
    return out;
  }
  /// Sub-block j of slot s, layer l (kv_layout packing: sub-block-major, layers inside).
  std::byte* cpu_page(cpu_slot s, uint32_t j, uint32_t layer) {
    return pool.data() + s * k_stride + j * (k_layers * k_page) + layer * k_page;
  }

  /// One engine step with the given metadata: bind, handle_preemptions, start_load_kv,
  /// wait_for_save, (optionally) wait for all transfers, get_finished, clear.
  worker_output step(const connector_metadata& meta, std::vector<std::string> finished = {},
                     bool wait = true) {
    EXPECT_TRUE(worker->bind_connector_metadata(meta).ok());
    EXPECT_TRUE(worker->handle_preemptions().ok());
    EXPECT_TRUE(worker->start_load_kv().ok());
    EXPECT_TRUE(worker->wait_for_save().ok());
    if (wait) {
      EXPECT_TRUE(worker->wait_in_flight().ok());
    }
    auto out = worker->get_finished(finished);
    worker->clear_connector_metadata();
    return out;
  }

  std::unique_ptr<cuda::copy_engine> engine;
  cuda::sim_copy_engine* sim = nullptr;
  cuda::faulty_copy_engine* faulty = nullptr;
  std::vector<cuda::device_buffer> layers;
  std::vector<std::byte> pool;
  std::optional<transfer_executor> worker;
};

transfer_job store_job(job_id id, std::string req, std::vector<cpu_slot> slots,
                       std::vector<gpu_block> blocks, uint32_t skip = 0) {
  return {id, std::move(req), transfer_kind::store, std::move(slots), std::move(blocks), skip, {}, {}};
}
transfer_job load_job(job_id id, std::string req, std::vector<cpu_slot> slots,
                      std::vector<gpu_block> blocks, uint32_t skip = 0) {
  return {id, std::move(req), transfer_kind::load, std::move(slots), std::move(blocks), skip, {}, {}};
}

std::vector<job_id> ids_of(const worker_output& out) {
  std::vector<job_id> ids;
  for (const auto& j : out.jobs) ids.push_back(j.job);
  return ids;
}

const rank_job_result* find_job(const worker_output& out, job_id id) {
  for (const auto& j : out.jobs) {
    if (j.job == id) return &j;
  }
  return nullptr;
}

using strings = std::vector<std::string>;

TEST(TransferExecutorTest, CreateRejectsBadConfig) {
  cuda::sim_copy_engine engine;
  std::vector<std::byte> pool(k_slots * k_stride);
  auto no_factor = transfer_executor::create({0, 0, {pool.data(), k_stride, k_slots}}, engine);
  ASSERT_FALSE(no_factor.ok());
  EXPECT_EQ(no_factor.code(), errc::invalid_argument);
  auto no_pool = transfer_executor::create({0, 1, {nullptr, k_stride, k_slots}}, engine);
  ASSERT_FALSE(no_pool.ok());
  EXPECT_EQ(no_pool.code(), errc::invalid_argument);
  auto no_slots = transfer_executor::create({0, 1, {pool.data(), k_stride, 0}}, engine);
  EXPECT_EQ(no_slots.code(), errc::invalid_argument);
  // A rejected config registered nothing: the region can still be registered.
  EXPECT_TRUE(transfer_executor::create({0, 1, {pool.data(), k_stride, k_slots}}, engine).ok());
}

TEST(TransferExecutorTest, RegisterRejectsBlocksThatDoNotFitASlot) {
  cuda::sim_copy_engine engine;
  std::vector<std::byte> pool(k_slots * 256);
  auto w = transfer_executor::create({3, /*factor=*/3, {pool.data(), 256, k_slots}}, engine);
  ASSERT_TRUE(w.ok());
  auto buf = engine.allocate_device(k_blocks * k_page);
  ASSERT_TRUE(buf.ok());
  const auto base = reinterpret_cast<uintptr_t>(buf->data);
  // 2 regions of 64 bytes x factor 3 = 384 bytes > 256.
  std::vector<cuda::kv_region> two{{base, k_page, 32}, {base + 32, k_page, 32}};
  std::vector<cuda::kv_region> too_big{{base, k_page, k_page}, {base + 8 * k_page, k_page, 32}};
  auto st = w->register_kv_regions(too_big, 8);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), errc::layout_mismatch);
  EXPECT_NE(st.message().find("rank 3 needs 288 bytes"), std::string::npos) << st.message();
  EXPECT_FALSE(w->layout().has_value());
  ASSERT_TRUE(w->register_kv_regions(two, k_blocks).ok());  // 3 x 64 = 192 fits
  EXPECT_EQ(w->register_kv_regions(two, k_blocks).code(), errc::precondition_failed);
}

TEST(TransferExecutorTest, StoreIsSubmittedInTheNextStepAndPacksSubBlocks) {
  rank_fixture f{/*factor=*/2};
  connector_metadata m1 = meta(1, {}, {store_job(7, "a", {3}, {5, 9})}, {});
  auto out1 = f.step(m1);
  EXPECT_TRUE(out1.jobs.empty());
  EXPECT_EQ(f.worker->phase(7), job_phase::queued);
  EXPECT_EQ(f.worker->transfers_in_flight(), 0u);
  EXPECT_EQ(*f.cpu_page(3, 0, 0), std::byte{0});  // nothing copied yet

  auto out2 = f.step(meta(2, {}, {}, {}));
  ASSERT_EQ(out2.jobs.size(), 1u);
  EXPECT_EQ(out2.jobs[0], (rank_job_result{7, transfer_kind::store, true, errc::ok,
                                           2 * k_layers * k_page, out2.jobs[0].seconds}));
  const gpu_block src[2] = {5, 9};
  for (uint32_t j = 0; j < 2; ++j) {
    for (uint32_t l = 0; l < k_layers; ++l) {
      auto page = f.gpu_page(l, src[j]);
      EXPECT_EQ(std::memcmp(f.cpu_page(3, j, l), page.data(), k_page), 0) << j << " " << l;
    }
  }
  EXPECT_EQ(f.worker->phase(7), job_phase::unknown);
  EXPECT_EQ(f.worker->jobs_known(), 0u);
  EXPECT_TRUE(f.step(meta(3, {}, {}, {})).jobs.empty());  // reported exactly once
}

TEST(TransferExecutorTest, LoadStartingMidOffloadedBlockSkipsLeadingSubBlocks) {
  rank_fixture f{/*factor=*/3};
  for (cpu_slot s = 1; s <= 2; ++s) {
    for (uint32_t j = 0; j < 3; ++j) {
      for (uint32_t l = 0; l < k_layers; ++l) {
        std::memset(f.cpu_page(s, j, l), static_cast<int>(0x10 * s + 4 * j + l), k_page);
      }
    }
  }
  const std::vector<gpu_block> dst{2, 3, 11, 12, 13};  // slot 1 sub-blocks 1,2; slot 2 all
  auto out = f.step(meta(1, {load_job(4, "r", {1, 2}, dst, /*skip=*/1)}, {}, {}));
  ASSERT_EQ(ids_of(out), std::vector<job_id>{4});
  EXPECT_TRUE(out.jobs[0].ok);
  EXPECT_EQ(out.jobs[0].bytes, 5 * k_layers * k_page);
  EXPECT_EQ(out.finished_recving, strings{"r"});
  for (size_t k = 0; k < dst.size(); ++k) {
    const cpu_slot s = k < 2 ? 1 : 2;
    const uint32_t j = k < 2 ? static_cast<uint32_t>(k + 1) : static_cast<uint32_t>(k - 2);
    for (uint32_t l = 0; l < k_layers; ++l) {
      EXPECT_EQ(f.gpu_page(l, dst[k]), std::vector<std::byte>(k_page, f.cpu_page(s, j, l)[0]))
          << "block " << dst[k] << " layer " << l;
    }
  }
  // Blocks outside the job are untouched.
  EXPECT_EQ(f.gpu_page(0, 1)[0], rank_fixture::gpu_byte(0, 1, 0));
  EXPECT_EQ(f.gpu_page(1, 14)[0], rank_fixture::gpu_byte(1, 14, 0));
  EXPECT_TRUE(f.worker->get_block_ids_with_load_errors().empty());
}

TEST(TransferExecutorTest, DeferredStoresAreSubmittedBeforeTheStepsLoads) {
  // The injector numbers transfers in submission order: fail the very first one.
  fault_plan plan{
      1, {{fault_target::any, fault_trigger::nth, 0, 0.0, fault_action::fail_at_submit, 0, 0}}};
  rank_fixture f{1, plan};
  EXPECT_TRUE(f.step(meta(1, {}, {store_job(1, "s", {0}, {4})}, {})).jobs.empty());
  // No handle_preemptions this time: start_load_kv submits the deferred store itself.
  auto& w = *f.worker;
  ASSERT_TRUE(w.bind_connector_metadata(meta(2, {load_job(2, "l", {5}, {6})}, {}, {})).ok());
  ASSERT_TRUE(w.start_load_kv().ok());
  ASSERT_TRUE(w.wait_for_save().ok());
  ASSERT_TRUE(w.wait_in_flight().ok());
  auto out = w.get_finished({});
  w.clear_connector_metadata();
  ASSERT_EQ(out.jobs.size(), 2u);
  EXPECT_FALSE(find_job(out, 1)->ok);  // the store went first and took the fault
  EXPECT_EQ(find_job(out, 1)->error, errc::injected_fault);
  EXPECT_TRUE(find_job(out, 2)->ok);
}

TEST(TransferExecutorTest, SubmitFailureIsAFailedJobReportedOnce) {
  fault_plan plan{
      1, {{fault_target::load, fault_trigger::nth, 0, 0.0, fault_action::fail_at_submit, 0, 0}}};
  rank_fixture f{2, plan};
  auto out =
      f.step(meta(1, {load_job(3, "r", {1, 2}, {7, 8, 9, 10}), load_job(4, "q", {3}, {5, 6})}, {}, {}));
  ASSERT_EQ(out.jobs.size(), 2u);
  // The refused submit's message is the job's detail, and its log line says both.
  EXPECT_EQ(*find_job(out, 3),
            (rank_job_result{.job = 3,
                             .kind = transfer_kind::load,
                             .ok = false,
                             .error = errc::injected_fault,
                             .detail = "injected fault: fail_at_submit (rule 0, load #0)"}));
  EXPECT_EQ(failure_line(*find_job(out, 3)),
            "job 3 (load) failed: injected_fault: injected fault: fail_at_submit (rule 0, load #0)");
  EXPECT_TRUE(find_job(out, 4)->ok);
  strings recving = out.finished_recving;
  std::sort(recving.begin(), recving.end());
  EXPECT_EQ(recving, (strings{"q", "r"}));  // a failed load still finishes its request
  EXPECT_EQ(f.worker->get_block_ids_with_load_errors(), (std::vector<gpu_block>{7, 8, 9, 10}));
  EXPECT_TRUE(f.worker->get_block_ids_with_load_errors().empty());
  // The failed load copied nothing.
  EXPECT_EQ(f.gpu_page(0, 7)[0], rank_fixture::gpu_byte(0, 7, 0));
  EXPECT_TRUE(f.step(meta(2, {}, {}, {})).jobs.empty());
}

TEST(TransferExecutorTest, FailureAtCompletionIsReportedWithItsError) {
  fault_plan plan{
      1,
      {{fault_target::store, fault_trigger::nth, 1, 0.0, fault_action::fail_at_completion, 0, 0}}};
  rank_fixture f{1, plan};
  f.step(meta(1, {}, {store_job(1, "a", {0}, {1}), store_job(2, "a", {1}, {2})}, {}));
  auto out = f.step(meta(2, {}, {}, {}));
  ASSERT_EQ(ids_of(out), (std::vector<job_id>{1, 2}));  // FIFO per direction
  EXPECT_TRUE(out.jobs[0].ok);
  EXPECT_FALSE(out.jobs[1].ok);
  EXPECT_EQ(out.jobs[1].error, errc::injected_fault);
  // The engine's report detail becomes the job's (the cuda backend's names the CUDA error).
  EXPECT_EQ(out.jobs[1].detail, "faulty copy engine: injected fail_at_completion");
  EXPECT_TRUE(out.jobs[0].detail.empty());
  EXPECT_TRUE(f.worker->get_block_ids_with_load_errors().empty());  // stores never count
}

TEST(TransferExecutorTest, JobsThatCannotBeBuiltFailInsteadOfCrashing) {
  rank_fixture f{2};
  auto out = f.step(meta(1,
                     {load_job(1, "r", {k_slots}, {1, 2}),       // slot out of range
                      load_job(2, "r2", {0}, {1, 2, 3}),         // count mismatch
                      load_job(3, "r3", {0}, {k_blocks, 1}),     // GPU block out of range
                      load_job(4, "r4", {0}, {1}, /*skip=*/2)},  // skip >= factor
                     {},
                     {}));
  ASSERT_EQ(out.jobs.size(), 4u);
  for (const auto& j : out.jobs) {
    EXPECT_FALSE(j.ok) << j.job;
    EXPECT_EQ(j.error, errc::invalid_argument) << j.job;
  }
  EXPECT_EQ(f.worker->get_block_ids_with_load_errors(),
            (std::vector<gpu_block>{1, 2, 1, 2, 3, k_blocks, 1, 1}));

  // Jobs before register_kv_caches fail with precondition_failed.
  cuda::sim_copy_engine engine;
  std::vector<std::byte> pool(k_slots * k_stride);
  auto w = transfer_executor::create({0, 1, {pool.data(), k_stride, k_slots}}, engine);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->bind_connector_metadata(meta(1, {load_job(9, "r", {0}, {1})}, {}, {})).ok());
  ASSERT_TRUE(w->start_load_kv().ok());
  auto o = w->get_finished({});
  ASSERT_EQ(o.jobs.size(), 1u);
  EXPECT_EQ(o.jobs[0].error, errc::precondition_failed);
}

TEST(TransferExecutorTest, MisuseIsRefusedAndChangesNothing) {
  rank_fixture f{1};
  auto& w = *f.worker;
  EXPECT_EQ(w.handle_preemptions().code(), errc::precondition_failed);
  EXPECT_EQ(w.start_load_kv().code(), errc::precondition_failed);
  EXPECT_EQ(w.wait_for_save().code(), errc::precondition_failed);

  connector_metadata dup = meta(1, {load_job(1, "a", {0}, {1})}, {store_job(1, "a", {1}, {2})}, {});
  EXPECT_EQ(w.bind_connector_metadata(dup).code(), errc::invalid_argument);
  EXPECT_FALSE(w.has_metadata());
  EXPECT_EQ(w.jobs_known(), 0u);

  ASSERT_TRUE(w.bind_connector_metadata(meta(1, {}, {store_job(5, "a", {1}, {2})}, {})).ok());
  EXPECT_EQ(w.bind_connector_metadata(meta(2, {}, {}, {})).code(), errc::precondition_failed);
  ASSERT_TRUE(w.start_load_kv().ok());
  EXPECT_EQ(w.start_load_kv().code(), errc::precondition_failed);
  ASSERT_TRUE(w.wait_for_save().ok());
  EXPECT_EQ(w.wait_for_save().code(), errc::precondition_failed);
  EXPECT_EQ(w.queued_stores(), 1u);  // queued once
  w.clear_connector_metadata();
  // Job 5 is still known (queued): reusing its id is refused.
  EXPECT_EQ(w.bind_connector_metadata(meta(2, {load_job(5, "b", {0}, {1})}, {}, {})).code(),
            errc::invalid_argument);
  EXPECT_EQ(w.queued_stores(), 1u);
}

TEST(TransferExecutorTest, ClearingUnstartedJobsFailsThemSoEachIsReported) {
  rank_fixture f{1};
  auto& w = *f.worker;
  ASSERT_TRUE(w.bind_connector_metadata(
                   meta(1, {load_job(1, "a", {0}, {1})}, {store_job(2, "b", {1}, {2})}))
                  .ok());
  EXPECT_EQ(w.phase(1), job_phase::bound);
  w.clear_connector_metadata();
  auto out = w.get_finished({});
  ASSERT_EQ(ids_of(out), (std::vector<job_id>{1, 2}));
  EXPECT_EQ(out.jobs[0].error, errc::precondition_failed);
  EXPECT_EQ(out.jobs[1].error, errc::precondition_failed);
  EXPECT_EQ(w.get_block_ids_with_load_errors(), std::vector<gpu_block>{1});
  EXPECT_EQ(w.jobs_known(), 0u);
}

TEST(TransferExecutorTest, HandlePreemptionsWaitsOnlyForFlushJobs) {
  // Every store's completion is held back until it is waited on (or released).
  fault_plan plan{
      1, {{fault_target::store, fault_trigger::probability, 0, 1.0, fault_action::delay, 0, 0}}};
  rank_fixture f{1, plan};
  f.step(meta(1, {}, {store_job(1, "a", {0}, {1}), store_job(2, "b", {1}, {2})}, {}));
  // Step 2 submits both; nothing is flushed, so both stay in flight.
  f.step(meta(2, {}, {}, {}), {}, /*wait=*/false);
  EXPECT_EQ(f.worker->phase(1), job_phase::in_flight);
  EXPECT_EQ(f.worker->phase(2), job_phase::in_flight);
  // Step 3 flushes job 2 (and an id the worker never saw): handle_preemptions blocks on it.
  ASSERT_TRUE(f.worker->bind_connector_metadata(meta(3, {}, {}, {2, 99})).ok());
  ASSERT_TRUE(f.worker->handle_preemptions().ok());
  EXPECT_EQ(f.worker->phase(2), job_phase::finished);  // FIFO: job 1 was released with it
  ASSERT_TRUE(f.worker->start_load_kv().ok());
  ASSERT_TRUE(f.worker->wait_for_save().ok());
  auto out = f.worker->get_finished({});
  EXPECT_EQ(ids_of(out), (std::vector<job_id>{1, 2}));
  f.worker->clear_connector_metadata();
}

// A rank with a file tier waits for the flush's transfers before it starts a step's tier jobs
// (a promotion may reuse a failed store's slot): only those, queued stores stay queued.
TEST(TransferExecutorTest, WaitTransfersWaitsOnlyForTheNamedJobsInFlight) {
  // Every transfer's completion is held back until it is waited on (or released).
  fault_plan plan{
      1, {{fault_target::any, fault_trigger::probability, 0, 1.0, fault_action::delay, 0, 0}}};
  rank_fixture f{1, plan};
  f.step(meta(1, {}, {store_job(1, "a", {0}, {1})}, {}));
  // Step 2 submits the store and loads slot 1: both in flight; its store 3 is queued.
  f.step(meta(2, {load_job(2, "b", {1}, {2})}, {store_job(3, "c", {2}, {3})}, {}), {},
         /*wait=*/false);
  EXPECT_EQ(f.worker->phase(1), job_phase::in_flight);
  EXPECT_EQ(f.worker->phase(2), job_phase::in_flight);
  ASSERT_TRUE(f.worker->wait_transfers(std::vector<job_id>{1, 3, 99}).ok());
  EXPECT_EQ(f.worker->phase(1), job_phase::finished);
  EXPECT_EQ(f.worker->phase(2), job_phase::in_flight);  // not named
  EXPECT_EQ(f.worker->phase(3), job_phase::queued);     // not submitted by a wait
  ASSERT_TRUE(f.worker->wait_in_flight().ok());
}

// A load that failed elsewhere (another rank, its deadline) comes back in a later step's
// `failed` (and flush). A rank that had not reported it names its request once, with the load's
// blocks as load errors although its own copy succeeded (vLLM reads failed loads only from its
// workers); a rank that had reported it adds nothing. A load flushed for its request's
// preemption is not withdrawn.
TEST(TransferExecutorTest, AFailedLoadNotYetReportedIsReportedOnceWithItsBlocksAsLoadErrors) {
  // Loads #1 and #2 (jobs 1 and 3) are held back until waited on; job 2 ahead of them is not.
  fault_plan plan{1,
                  {{fault_target::load, fault_trigger::nth, 1, 0.0, fault_action::delay, 0, 0},
                   {fault_target::load, fault_trigger::nth, 2, 0.0, fault_action::delay, 0, 0}}};
  rank_fixture f{1, plan};
  auto& w = *f.worker;
  ASSERT_TRUE(w.bind_connector_metadata(
                   meta(1, {load_job(2, "b", {1}, {5}), load_job(1, "a", {2, 3}, {3, 4}),
                            load_job(3, "c", {4}, {6})}))
                  .ok());
  ASSERT_TRUE(w.handle_preemptions().ok());
  ASSERT_TRUE(w.start_load_kv().ok());
  ASSERT_TRUE(w.wait_for_save().ok());
  ASSERT_TRUE(w.wait_transfers(std::vector<job_id>{2}).ok());
  auto out1 = w.get_finished({});
  w.clear_connector_metadata();
  EXPECT_EQ(ids_of(out1), std::vector<job_id>{2});
  EXPECT_EQ(out1.finished_recving, strings{"b"});
  EXPECT_EQ(w.phase(1), job_phase::in_flight);
  EXPECT_EQ(w.phase(3), job_phase::in_flight);

  // Step 2: the scheduler failed a's and b's loads (flushed, with an id never seen); c is
  // preempted, its load flushed with it.
  connector_metadata m2 = meta(2, {}, {}, {1, 2, 99, 3});
  m2.failed = {1, 2, 99};
  m2.flush_requests = {"c"};
  auto out2 = f.step(m2, {}, /*wait=*/false);
  EXPECT_EQ(ids_of(out2), (std::vector<job_id>{1, 3}));  // handle_preemptions waited for both
  EXPECT_TRUE(out2.jobs[0].ok);
  EXPECT_EQ(out2.finished_recving, (strings{"a", "c"}));  // b once, in step 1
  EXPECT_EQ(w.get_block_ids_with_load_errors(), (std::vector<gpu_block>{3, 4}));
  EXPECT_EQ(w.withdrawn_loads(), 0u);
  // The copy itself succeeded: the blocks hold the slots' bytes.
  EXPECT_EQ(std::memcmp(f.cpu_page(2, 0, 0), f.gpu_page(0, 3).data(), k_page), 0);

  // Later steps name none of them again.
  auto out3 = f.step(meta(3, {}, {}, {1, 2, 3}));
  EXPECT_TRUE(out3.jobs.empty());
  EXPECT_TRUE(out3.finished_recving.empty());
  EXPECT_TRUE(w.get_block_ids_with_load_errors().empty());
  EXPECT_EQ(w.jobs_known(), 0u);
}

// A load `flush` names without `failed` (in flight at a reset: stale) is waited for and
// reported with its own outcome: its request once, its bytes good, no load error.
TEST(TransferExecutorTest, AFlushedLoadThatDidNotFailEndsWithItsBytesAndNoLoadError) {
  fault_plan plan{1, {{fault_target::load, fault_trigger::nth, 0, 0.0, fault_action::delay, 0, 0}}};
  rank_fixture f{1, plan};
  auto& w = *f.worker;
  auto out1 = f.step(meta(1, {load_job(1, "a", {2, 3}, {3, 4})}), {}, /*wait=*/false);
  EXPECT_TRUE(out1.jobs.empty());
  EXPECT_EQ(w.phase(1), job_phase::in_flight);

  auto out2 = f.step(meta(2, {}, {}, {1}), {}, /*wait=*/false);  // stale: flushed, not failed
  EXPECT_EQ(ids_of(out2), std::vector<job_id>{1});               // handle_preemptions waited for it
  EXPECT_TRUE(out2.jobs[0].ok);
  EXPECT_EQ(out2.finished_recving, strings{"a"});
  EXPECT_TRUE(w.get_block_ids_with_load_errors().empty());
  EXPECT_EQ(std::memcmp(f.cpu_page(2, 0, 0), f.gpu_page(0, 3).data(), k_page), 0);
  EXPECT_EQ(w.jobs_known(), 0u);
}

TEST(TransferExecutorTest, HandlePreemptionsSubmitsDeferredStoresBeforeFlushing) {
  rank_fixture f{1};
  f.sim->pause(cuda::direction::gpu_to_cpu);
  f.step(meta(1, {}, {store_job(1, "a", {0}, {3})}, {}));
  f.sim->resume(cuda::direction::gpu_to_cpu);
  EXPECT_EQ(f.worker->phase(1), job_phase::queued);
  ASSERT_TRUE(f.worker->bind_connector_metadata(meta(2, {}, {}, {1})).ok());
  ASSERT_TRUE(f.worker->handle_preemptions().ok());
  EXPECT_EQ(f.worker->phase(1), job_phase::finished);
  EXPECT_EQ(std::memcmp(f.cpu_page(0, 0, 1), f.gpu_page(1, 3).data(), k_page), 0);
  ASSERT_TRUE(f.worker->start_load_kv().ok());  // does not submit the stores twice
  ASSERT_TRUE(f.worker->wait_for_save().ok());
  EXPECT_EQ(ids_of(f.worker->get_finished({})), std::vector<job_id>{1});
  f.worker->clear_connector_metadata();
}

TEST(TransferExecutorTest, RequestLevelSetsFollowR1) {
  rank_fixture f{1};
  // Step 1: stores for a (two jobs) and b (one job); c has none.
  f.step(meta(1,
          {},
          {store_job(1, "a", {0}, {1}), store_job(2, "a", {1}, {2}), store_job(3, "b", {2}, {3})},
          {}));
  // Step 2: the stores run. Hold them so that a and b finish while they are in flight.
  f.sim->pause(cuda::direction::gpu_to_cpu);
  auto out2 = f.step(meta(2, {}, {store_job(4, "b", {3}, {4})}, {}), {}, /*wait=*/false);
  EXPECT_TRUE(out2.jobs.empty());
  // Step 3: a and c finish. a has jobs in flight -> waiting; c has no set -> nothing.
  auto out3 = f.step(meta(3, {}, {}, {}), {"a", "c"}, /*wait=*/false);
  EXPECT_TRUE(out3.finished_sending.empty());
  f.sim->resume(cuda::direction::gpu_to_cpu);
  ASSERT_TRUE(f.worker->wait_in_flight().ok());
  // Step 4: jobs 1..4 finish (4 was submitted at step 3's start). a's set empties while a is
  // waiting -> sending. b's set is empty but b has not finished -> nothing yet.
  auto out4 = f.step(meta(4, {}, {}, {}));
  EXPECT_EQ(ids_of(out4), (std::vector<job_id>{1, 2, 3, 4}));
  EXPECT_EQ(out4.finished_sending, strings{"a"});
  // Step 5: b finishes with an existing empty set -> sending at once; a is gone -> nothing.
  auto out5 = f.step(meta(5, {}, {}, {}), {"b", "a"});
  EXPECT_EQ(out5.finished_sending, strings{"b"});
  EXPECT_TRUE(f.step(meta(6, {}, {}, {}), {"b"}).finished_sending.empty());
}

TEST(TransferExecutorTest, ForeignTransfersOnTheEngineAreIgnored) {
  rank_fixture f{1};
  std::vector<std::byte> host(k_page);
  cuda::copy_op op{host.data(), f.layers[0].data, k_page};
  // The pool region is the registered host range; the sim accepts heap memory for the CPU side.
  auto tid = f.engine->submit(cuda::direction::cpu_to_gpu, std::span(&op, 1));
  ASSERT_TRUE(tid.ok()) << tid.error().to_string();
  ASSERT_TRUE(f.engine->wait(std::span(&*tid, 1)).ok());
  auto out = f.step(meta(1, {}, {}, {}));
  EXPECT_TRUE(out.jobs.empty());
  EXPECT_EQ(f.worker->foreign_reports(), 1u);
}

}  // namespace
}  // namespace kvc::worker
