// End-to-end tests of the offloading connector: the embedding facades (one scheduler_connector,
// one worker_connector per rank, the memory step channel, the real coordinator) driven step by
// step by the deterministic engine model over manual copy engines, whose transfers complete when
// the model or the test says so. Every step checks, byte for byte, the KV of every running
// request on every rank.
// Geometry unless stated: GPU block 4 tokens, factor 3 (offloaded block 12 tokens), 2 layers.
// Scenario numbers refer to shared/reference/vllm_offload.md §9.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cuda/manual_copy_engine.hpp"
#include "proto/fault_plan.hpp"
#include "shm/segment.hpp"
#include "tests/connector/engine_model.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::testing {
namespace {

using strings = std::vector<std::string>;
using tokens = std::vector<uint32_t>;
using blocks = std::vector<gpu_block>;

tokens seq(uint32_t n, uint32_t base) {
  tokens t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = base + i;
  return t;
}
tokens head(const tokens& t, size_t n) {
  return {t.begin(), t.begin() + n};
}
tokens plus(tokens t, std::initializer_list<uint32_t> more) {
  t.insert(t.end(), more);
  return t;
}
blocks slice(const blocks& b, size_t from, size_t to) {
  return {b.begin() + from, b.begin() + to};
}

std::string join(const strings& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

fault_plan one_fault(fault_target t, fault_action a, uint64_t nth = 0) {
  return {7, {{t, fault_trigger::nth, nth, 0.0, a, 0, 0}}};
}

/// Every test's pool segment is named after this process and must be gone when the test ends.
class EngineLoopTest : public shm::testing::ShmTest {
 protected:
  std::unique_ptr<engine_model> make_model(engine_config cfg = {}) {
    cfg.instance = shm::testing::test_instance_prefix() + "engine" + std::to_string(models_++);
    auto m = engine_model::create(std::move(cfg));
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? std::move(m).value() : nullptr;
  }

  /// Every rank's copy engine fails as `plan` says.
  std::unique_ptr<engine_model> make_faulty_model(fault_plan plan, engine_config cfg = {}) {
    cfg.faults = [plan](rank_id) { return plan; };
    return make_model(std::move(cfg));
  }

 private:
  int models_ = 0;
};

step_report step_ok(engine_model& m) {
  auto rep = m.step();
  EXPECT_TRUE(rep.errors.empty()) << "step " << rep.step << ":\n" << join(rep.errors);
  return rep;
}

std::vector<step_report> run_clean(engine_model& m, uint32_t max_steps = 200) {
  auto reps = m.run_until_idle(max_steps);
  for (const auto& rep : reps) {
    EXPECT_TRUE(rep.errors.empty()) << "step " << rep.step << ":\n" << join(rep.errors);
  }
  EXPECT_TRUE(m.idle());
  return reps;
}

/// `r` runs to completion (its full offloaded blocks are stored in the CPU pool), then the GPU
/// prefix cache forgets it: the next request with its prefix must load.
void offload(engine_model& m, request_spec r) {
  m.add_request(std::move(r));
  run_clean(m);
  m.reset_prefix_cache();
}

/// Everything given back: no request, block, job or pinned key left anywhere.
void expect_drained(engine_model& m) {
  EXPECT_TRUE(m.idle());
  EXPECT_EQ(m.pool().num_free(), m.config().num_gpu_blocks - 1);
  EXPECT_EQ(m.scheduler().tracked_requests(), 0u);
  EXPECT_EQ(m.scheduler().jobs_in_flight(), 0u);
  EXPECT_EQ(m.scheduler().stats().rejected_results, 0u);  // every job reported exactly once
  // No duplicate, late, rejected or timed-out report at the coordinator.
  EXPECT_EQ(m.scheduler().fault_statistics(), embed::fault_stats{});
  for (rank_id r = 0; r < m.config().world_size; ++r) {
    EXPECT_EQ(m.worker(r).jobs_known(), 0u);
    EXPECT_EQ(m.worker(r).tracked_requests(), 0u);
  }
}

size_t count_loads(const std::vector<step_report>& reps) {
  size_t n = 0;
  for (const auto& r : reps) n += r.meta.loads.size();
  return n;
}

/// Bytes of one GPU block on one rank with the default geometry (2 layers x K/V x 4 x 8).
constexpr uint64_t k_block_bytes = 2 * 2 * 4 * 8;

// ---------------------------------------------------------------------------------------------

// §9.19 (first half): a store planned in step n is submitted in step n+1; a finished request
// with a store in flight keeps its blocks until finished_sending; reloading is byte-exact.
TEST_F(EngineLoopTest, StoreRunsOneStepLaterAndReloadIsByteExact) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens p = seq(36, 1000);
  m->add_request({"a", p, 1});
  auto r1 = step_ok(*m);
  EXPECT_EQ(r1.scheduled, strings{"a"});
  ASSERT_EQ(r1.meta.stores.size(), 1u);
  const transfer_job store = r1.meta.stores[0];
  EXPECT_EQ(store.slots.size(), 3u);
  EXPECT_EQ(store.gpu_blocks, slice(m->blocks_of("a"), 0, 9));
  EXPECT_EQ(store.skip, 0u);
  EXPECT_TRUE(r1.output.jobs.empty());  // queued by wait_for_save, not submitted
  EXPECT_EQ(r1.finished, strings{"a"});
  EXPECT_EQ(m->state_of("a"), request_state::finished_holding);  // delay_free

  auto r2 = step_ok(*m);
  ASSERT_EQ(r2.output.jobs.size(), 1u);
  EXPECT_EQ(r2.output.jobs[0], (job_result{store.id, transfer_kind::store, true, errc::ok,
                                           9 * k_block_bytes, r2.output.jobs[0].seconds}));
  EXPECT_EQ(r2.completions.finished_sending, strings{"a"});
  EXPECT_EQ(r2.rank_outputs[0].finished_sending, strings{"a"});  // the worker's R1 sets agree
  EXPECT_EQ(m->state_of("a"), request_state::done);
  run_clean(*m);
  expect_drained(*m);

  m->reset_prefix_cache();
  m->add_request({"b", plus(p, {7}), 2});
  auto r3 = step_ok(*m);
  EXPECT_TRUE(r3.scheduled.empty());
  ASSERT_EQ(r3.meta.loads.size(), 1u);
  EXPECT_EQ(r3.meta.loads[0].slots, store.slots);
  EXPECT_EQ(r3.meta.loads[0].gpu_blocks, slice(m->blocks_of("b"), 0, 9));
  EXPECT_EQ(r3.completions.finished_recving, strings{"b"});
  EXPECT_EQ(r3.rank_outputs[0].finished_recving, strings{"b"});
  EXPECT_EQ(m->runner_stats(0).loads_verified, 9u);  // the runner checked the loaded blocks
  EXPECT_EQ(m->runner_stats(0).load_mismatches, 0u);
  auto r4 = step_ok(*m);
  EXPECT_EQ(r4.scheduled, strings{"b"});
  EXPECT_EQ(m->num_computed("b"), 37u);  // 36 loaded + 1 computed
  EXPECT_EQ(m->verify_tokens(m->tokens_of("b"), 37, m->blocks_of("b")), strings{});
  run_clean(*m);
  EXPECT_EQ(m->stats().tokens_loaded, 36u);
  EXPECT_EQ(m->stats().tokens_computed, 36u + 1 + 1);
  expect_drained(*m);
}

// §9.19: prepare_store only gets slots for the keys not stored yet.
TEST_F(EngineLoopTest, StoreSkipsKeysAlreadyOffloaded) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  m->add_request({"a", a, 1});
  run_clean(*m);
  const tokens b = plus(head(a, 24), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  m->add_request({"b", b, 1});
  m->manager().take_record();
  auto r = step_ok(*m);
  // b hits a's first 6 GPU blocks; the connector looks up only key 2 (a miss).
  EXPECT_EQ(m->num_computed("b"), 36u);
  auto rec = m->manager().take_record();
  EXPECT_EQ(rec.keys_looked_up, 1u);
  ASSERT_EQ(rec.stores.size(), 1u);
  EXPECT_EQ(rec.stores[0].keys, m->keys_of(b));
  ASSERT_TRUE(rec.stores[0].planned.has_value());
  EXPECT_EQ(*rec.stores[0].planned, std::vector<block_key>{m->keys_of(b)[2]});
  ASSERT_EQ(r.meta.stores.size(), 1u);
  EXPECT_EQ(r.meta.stores[0].slots.size(), 1u);
  EXPECT_EQ(r.meta.stores[0].gpu_blocks, slice(m->blocks_of("b"), 6, 9));
  run_clean(*m);
  expect_drained(*m);
}

// §9.20: decoding stores each newly completed offloaded block once, when it completes.
TEST_F(EngineLoopTest, DecodeStoresEachCompletedOffloadedBlockOnce) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  m->add_request({"a", seq(36, 1000), 14});  // computes 36 + 13 = 49 tokens
  std::vector<std::pair<step_id, blocks>> stores;
  std::vector<step_id> prepare_store_steps;
  while (!m->idle()) {
    auto r = step_ok(*m);
    ASSERT_TRUE(r.errors.empty());
    for (const auto& j : r.meta.stores) stores.emplace_back(r.step, j.gpu_blocks);
    if (!m->manager().take_record().stores.empty()) prepare_store_steps.push_back(r.step);
  }
  // Token 47 (the 48th) is computed in decode step 12, i.e. engine step 13; prepare_store is
  // not even called in the steps in between (less than a new offloaded block).
  EXPECT_EQ(prepare_store_steps, (std::vector<step_id>{1, 13}));
  ASSERT_EQ(stores.size(), 2u);
  EXPECT_EQ(stores[0].first, 1u);
  EXPECT_EQ(stores[0].second.size(), 9u);
  EXPECT_EQ(stores[1].first, 13u);
  EXPECT_EQ(stores[1].second.size(), 3u);
  blocks all = stores[0].second;
  all.insert(all.end(), stores[1].second.begin(), stores[1].second.end());
  EXPECT_EQ(std::set<gpu_block>(all.begin(), all.end()).size(), 12u);
  expect_drained(*m);
}

// §9.20: no room in the CPU pool (every slot has a store in flight) -> the store is retried
// in later steps with the cursor kept, and goes through once room appears.
TEST_F(EngineLoopTest, StoreWithoutRoomIsRetriedUntilItFits) {
  engine_config cfg;
  cfg.cpu_slots = 3;
  cfg.wait_at_step_end = false;  // the stores stay in flight: nothing completes meanwhile
  auto m = make_model(cfg);
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  m->add_request({"a", a, 20});
  for (int i = 0; i < 15; ++i) step_ok(*m);  // token 47 computed in step 13
  EXPECT_EQ(m->scheduler().stats().stores_planned, 1u);
  EXPECT_GE(m->scheduler().stats().store_retries, 3u);  // steps 13, 14, 15
  EXPECT_EQ(m->engine(0).pending(cuda::direction::gpu_to_cpu), 1u);
  m->set_wait_at_step_end(true);  // the store completes, its slots become evictable
  auto reps = run_clean(*m);
  EXPECT_EQ(m->scheduler().stats().stores_planned, 2u);
  EXPECT_EQ(m->scheduler().stats().stores_ok, 2u);
  // The retried store evicted one of a's idle keys to store the 4th.
  EXPECT_EQ(m->manager().size(), 3u);
  expect_drained(*m);
}

// §9.21: a prompt sharing 5 offloaded blocks touches 6 keys (5 equal) and stores only the 6th.
TEST_F(EngineLoopTest, SharedPrefixTouchesAllKeysAndStoresOnlyTheNewBlock) {
  engine_config cfg;
  cfg.num_gpu_blocks = 48;
  auto m = make_model(cfg);
  ASSERT_NE(m, nullptr);
  const tokens a(72, 0);
  tokens b(71, 0);
  b.push_back(1);
  m->add_request({"a", a, 1});
  run_clean(*m);
  m->manager().take_record();
  m->add_request({"b", b, 1});
  auto r = step_ok(*m);
  auto rec = m->manager().take_record();
  ASSERT_FALSE(rec.touches.empty());
  const auto& touched = rec.touches.front();  // get_num_new_matched_tokens' touch
  const auto ka = m->keys_of(a);
  const auto kb = m->keys_of(b);
  ASSERT_EQ(touched.size(), 6u);
  EXPECT_TRUE(std::equal(touched.begin(), touched.begin() + 5, ka.begin()));
  EXPECT_NE(touched[5], ka[5]);
  EXPECT_EQ(touched, kb);
  EXPECT_EQ(rec.keys_looked_up, 0u);  // 17 GPU-cached blocks: less than one block to find
  ASSERT_EQ(r.meta.stores.size(), 1u);
  EXPECT_EQ(r.meta.stores[0].gpu_blocks, slice(m->blocks_of("b"), 15, 18));
  run_clean(*m);
  expect_drained(*m);
}

// §9.22: no lookup when less than one offloaded block lies beyond the GPU hit; one otherwise.
TEST_F(EngineLoopTest, LookupOnlyWhenAWholeOffloadedBlockIsMissing) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(5, 1000);
  m->add_request({"a", a, 1});
  run_clean(*m);
  m->manager().take_record();
  m->add_request({"b", plus(head(a, 4), {1, 2, 3, 4, 5, 6, 7, 8}), 1});
  step_ok(*m);
  EXPECT_EQ(m->num_computed("b"), 12u);
  EXPECT_EQ(m->manager().take_record().keys_looked_up, 0u);
  run_clean(*m);
  m->add_request({"c", seq(12, 5000), 1});
  step_ok(*m);
  EXPECT_EQ(m->manager().take_record().keys_looked_up, 1u);
  run_clean(*m);
  expect_drained(*m);
}

// §9.23: after a GPU prefix-cache reset, a 12-token prompt loads GPU blocks 0-2; a longer one
// with those 12 tokens GPU-cached again loads only the blocks after them.
TEST_F(EngineLoopTest, LoadsFillOnlyTheBlocksAfterTheGpuCachedPrefix) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  offload(*m, {"a", a, 1});

  m->add_request({"b", head(a, 12), 1});
  auto rb = step_ok(*m);
  ASSERT_EQ(rb.meta.loads.size(), 1u);
  EXPECT_EQ(rb.meta.loads[0].gpu_blocks, m->blocks_of("b"));
  EXPECT_EQ(rb.meta.loads[0].skip, 0u);
  run_clean(*m);
  EXPECT_EQ(m->stats().tokens_loaded, 12u);
  EXPECT_EQ(m->stats().tokens_computed, 36u + 1);  // a's prefill + b's recomputed last token

  m->add_request({"c", plus(a, {9}), 1});
  auto rc = step_ok(*m);
  ASSERT_EQ(rc.meta.loads.size(), 1u);
  EXPECT_EQ(rc.meta.loads[0].slots.size(), 2u);
  EXPECT_EQ(rc.meta.loads[0].gpu_blocks, slice(m->blocks_of("c"), 3, 9));
  EXPECT_EQ(rc.meta.loads[0].skip, 0u);
  run_clean(*m);
  EXPECT_EQ(m->stats().tokens_loaded, 12u + 24);
  expect_drained(*m);
}

// A GPU-cached prefix that ends inside an offloaded block: the load skips the sub-blocks the
// GPU already has (skip = 1 of factor 3) and fills the rest byte-exactly.
TEST_F(EngineLoopTest, LoadStartingMidOffloadedBlockSkipsCachedSubBlocks) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  offload(*m, {"a", a, 1});
  m->add_request({"d", plus(head(a, 4), {9}), 1});  // caches a's first GPU block again
  run_clean(*m);
  const uint64_t computed_before = m->stats().tokens_computed;

  m->add_request({"e", plus(a, {7}), 3});
  auto r = step_ok(*m);
  ASSERT_EQ(r.meta.loads.size(), 1u);
  const auto& load = r.meta.loads[0];
  EXPECT_EQ(load.slots.size(), 3u);
  EXPECT_EQ(load.skip, 1u);
  EXPECT_EQ(load.gpu_blocks, slice(m->blocks_of("e"), 1, 9));
  run_clean(*m);
  EXPECT_EQ(m->stats().tokens_loaded, 32u);
  EXPECT_EQ(m->stats().tokens_computed - computed_before, 1u + 2);  // 1 prefill + 2 decode
  expect_drained(*m);
}

// §9.24: stored events carry the keys of completed stores; evictions come as removed events,
// before the stored event of the store that evicted them.
TEST_F(EngineLoopTest, EventsReportStoredAndEvictedKeys) {
  engine_config cfg;
  cfg.cpu_slots = 3;
  auto m = make_model(cfg);
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  const tokens b = seq(36, 2000);
  m->add_request({"a", a, 1});
  run_clean(*m);
  auto ev = m->scheduler().take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], (kv_event{kv_event_kind::stored, medium::cpu, m->keys_of(a)}));
  m->add_request({"b", b, 1});
  run_clean(*m);
  ev = m->scheduler().take_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, kv_event_kind::removed);
  auto removed = ev[0].keys;
  auto ka = m->keys_of(a);
  std::sort(removed.begin(), removed.end());
  std::sort(ka.begin(), ka.end());
  EXPECT_EQ(removed, ka);
  EXPECT_EQ(ev[1], (kv_event{kv_event_kind::stored, medium::cpu, m->keys_of(b)}));
  expect_drained(*m);
}

// §9.25: a preempted request's stores are flushed before its GPU blocks are reused; it resumes
// later, and its offloaded blocks are exact.
TEST_F(EngineLoopTest, PreemptionFlushesStoresBeforeBlocksAreReused) {
  engine_config cfg;
  cfg.num_gpu_blocks = 16;  // 15 usable: two 24-token requests run out while decoding
  // No transfer completes by itself (the manual engine), so only handle_preemptions' flush can
  // complete b's store in the preemption step.
  cfg.wait_at_step_end = false;
  auto m = make_model(cfg);
  ASSERT_NE(m, nullptr);
  const tokens a = seq(24, 1000);
  const tokens b = seq(24, 2000);
  m->add_request({"a", a, 16});
  m->add_request({"b", b, 16});
  std::vector<job_id> flushed;
  std::vector<size_t> stores_in_flight;  // rank 0's submitted, uncompleted stores at a flush
  m->set_before_workers([&](const connector_metadata& meta) {
    for (job_id id : meta.flush) {
      flushed.push_back(id);
      stores_in_flight.push_back(m->engine(0).pending(cuda::direction::gpu_to_cpu));
    }
  });
  step_report pre;
  for (int i = 0; i < 20 && pre.preempted.empty(); ++i) pre = step_ok(*m);
  ASSERT_EQ(pre.preempted, strings{"b"});
  ASSERT_EQ(flushed.size(), 1u);  // b's prefill store
  // b's store (and a's, queued before it) were in flight when the flush was planned.
  EXPECT_EQ(stores_in_flight[0], 2u);
  // handle_preemptions waited for it: it is reported in the preemption step itself.
  std::vector<job_id> reported;
  for (const auto& j : pre.rank_outputs[0].jobs) reported.push_back(j.job);
  EXPECT_NE(std::find(reported.begin(), reported.end(), flushed[0]), reported.end());
  m->set_before_workers({});
  m->set_wait_at_step_end(true);
  run_clean(*m);
  EXPECT_EQ(m->stats().preemptions, 1u);
  expect_drained(*m);

  // b's offloaded prefix is exact: reload it into a fresh request.
  m->reset_prefix_cache();
  m->add_request({"c", plus(b, {3}), 1});
  auto r = step_ok(*m);
  ASSERT_EQ(r.meta.loads.size(), 1u);
  EXPECT_EQ(r.meta.loads[0].slots.size(), 2u);
  run_clean(*m);
  EXPECT_EQ(m->stats().tokens_loaded, 24u);
  expect_drained(*m);
}

// §9.26: a request whose hit blocks are being loaded for another one waits (nullopt), then uses
// the GPU prefix cache: one load for both.
TEST_F(EngineLoopTest, SamePrefixInFlightIsLoadedOnce) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  offload(*m, {"a", a, 1});
  m->add_request({"b", plus(a, {1}), 2});
  m->add_request({"c", plus(a, {2}), 2});
  auto r = step_ok(*m);
  EXPECT_EQ(r.meta.loads.size(), 1u);
  EXPECT_EQ(m->state_of("b"), request_state::waiting_for_remote_kvs);
  EXPECT_EQ(m->state_of("c"), request_state::waiting);
  EXPECT_EQ(m->scheduler().stats().deferred, 1u);
  auto reps = run_clean(*m);
  EXPECT_EQ(count_loads(reps), 0u);
  EXPECT_EQ(m->stats().tokens_loaded, 36u);
  EXPECT_EQ(m->stats().tokens_computed, 36u + 2 + 2);  // c computed only its own tokens
  expect_drained(*m);
}

// §9.27: an aborted request keeps its blocks until its load completes, then goes away.
TEST_F(EngineLoopTest, AbortDuringLoadKeepsBlocksUntilTheLoadEnds) {
  auto m = make_model();
  ASSERT_NE(m, nullptr);
  const tokens a = seq(36, 1000);
  offload(*m, {"a", a, 1});

  m->set_wait_at_step_end(false);  // b's load stays in flight
  m->add_request({"b", plus(a, {1}), 2});
  step_ok(*m);
  ASSERT_EQ(m->state_of("b"), request_state::waiting_for_remote_kvs);
  m->abort("b");
  step_ok(*m);
  EXPECT_EQ(m->state_of("b"), request_state::finished_holding);
  EXPECT_TRUE(m->scheduler().planner().load_in_flight("b"));
  EXPECT_EQ(m->engine(0).pending(cuda::direction::cpu_to_gpu), 1u);
  EXPECT_EQ(m->pool().num_free(), m->config().num_gpu_blocks - 1 - 9);

  m->set_wait_at_step_end(true);
  auto r = step_ok(*m);
  EXPECT_EQ(r.completions.finished_recving, strings{"b"});
  EXPECT_EQ(m->state_of("b"), request_state::done);
  run_clean(*m);
  expect_drained(*m);
}

// §9.28: with do_remote_decode the loaded prefix is offered to prepare_store again at EOS.
TEST_F(EngineLoopTest, RemoteDecodeOffersTheLoadedPrefixForStoringAgain) {
  for (bool remote : {false, true}) {
    SCOPED_TRACE(remote ? "do_remote_decode" : "plain");
    auto m = make_model();
    ASSERT_NE(m, nullptr);
    const tokens a = seq(13, 1000);
    offload(*m, {"a", a, 1});
    m->manager().take_record();
    const tokens b = plus(head(a, 12), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
    m->add_request({"b", b, 1, remote});
    auto reps = run_clean(*m);
    EXPECT_EQ(count_loads(reps), 1u);
    auto rec = m->manager().take_record();
    ASSERT_EQ(rec.stores.size(), 1u);
    const auto kb = m->keys_of(b);
    EXPECT_EQ(rec.stores[0].keys, remote ? kb : std::vector<block_key>{kb[1]});  // GPU 0-5 vs 3-5
    EXPECT_EQ(*rec.stores[0].planned, std::vector<block_key>{kb[1]});
    expect_drained(*m);
  }
}

// ---------------------------------------------------------------------------------------------
// Faults: failures are reported, never crash, free what they must, and lead to recompute.

TEST_F(EngineLoopTest, FailedStoreFreesItsSlotsSoTheKeysNoLongerHit) {
  for (auto action : {fault_action::fail_at_submit, fault_action::fail_at_completion}) {
    SCOPED_TRACE(to_string(action));
    auto m = make_faulty_model(one_fault(fault_target::store, action));
    ASSERT_NE(m, nullptr);
    const tokens a = seq(36, 1000);
    m->add_request({"a", a, 1});
    auto reps = run_clean(*m);
    ASSERT_EQ(reps.size(), 2u);
    ASSERT_EQ(reps[1].output.jobs.size(), 1u);
    EXPECT_FALSE(reps[1].output.jobs[0].ok);
    EXPECT_EQ(reps[1].output.jobs[0].error, errc::injected_fault);
    EXPECT_EQ(reps[1].completions.finished_sending, strings{"a"});  // blocks still freed
    EXPECT_EQ(m->scheduler().stats().stores_failed, 1u);
    EXPECT_EQ(m->manager().size(), 0u);  // slots freed
    EXPECT_TRUE(m->scheduler().take_events().empty());
    expect_drained(*m);

    m->reset_prefix_cache();
    m->add_request({"b", plus(a, {1}), 1});
    reps = run_clean(*m);
    EXPECT_EQ(count_loads(reps), 0u);  // a's keys miss: b recomputes and stores them
    EXPECT_EQ(m->scheduler().stats().stores_ok, 1u);
    EXPECT_EQ(m->manager().size(), 3u);
    expect_drained(*m);
  }
}

TEST_F(EngineLoopTest, FailedLoadIsReportedAndRecomputedExactly) {
  // fail_at_submit copies nothing, so the blocks hold stale bytes unless recomputed;
  // fail_at_completion copies but reports failure: the blocks must be recomputed anyway.
  for (auto action : {fault_action::fail_at_submit, fault_action::fail_at_completion}) {
    SCOPED_TRACE(to_string(action));
    auto m = make_faulty_model(one_fault(fault_target::load, action));
    ASSERT_NE(m, nullptr);
    const tokens a = seq(36, 1000);
    offload(*m, {"a", a, 1});
    m->add_request({"d", plus(head(a, 4), {9}), 1});  // GPU-caches a's first block
    run_clean(*m);
    const uint64_t computed_before = m->stats().tokens_computed;

    m->add_request({"e", plus(a, {7}), 2});
    auto r = step_ok(*m);
    ASSERT_EQ(r.meta.loads.size(), 1u);
    const blocks dst = r.meta.loads[0].gpu_blocks;  // e's blocks 1..8 (skip 1)
    EXPECT_EQ(r.output.jobs.size(), 1u);
    EXPECT_FALSE(r.output.jobs[0].ok);
    EXPECT_EQ(r.completions.finished_recving, strings{"e"});
    EXPECT_EQ(r.completions.invalid_block_ids, dst);
    EXPECT_EQ(r.rank_load_errors[0], dst);  // the worker's view agrees
    run_clean(*m);
    EXPECT_EQ(m->stats().tokens_loaded, 0u);
    EXPECT_EQ(m->stats().tokens_invalidated, 32u);
    // Recomputed from the first invalid block: the GPU-cached first block is kept.
    EXPECT_EQ(m->stats().tokens_computed - computed_before, 33u + 1);
    EXPECT_EQ(m->scheduler().stats().loads_failed, 1u);
    expect_drained(*m);

    // The keys are still offloaded: the next request loads them successfully.
    m->reset_prefix_cache();
    m->add_request({"f", plus(a, {8}), 1});
    run_clean(*m);
    EXPECT_EQ(m->stats().tokens_loaded, 36u);
    expect_drained(*m);
  }
}

// ---------------------------------------------------------------------------------------------
// TP = 2: two workers on two engines share the node's shm pool (each its rank region).

TEST_F(EngineLoopTest, TwoRanksShareOneShmPoolAndAFailureOnOneRankFailsTheJob) {
  std::string name;
  {
    engine_config cfg;
    cfg.world_size = 2;
    // Rank 1's second load fails at submit; rank 0 never fails.
    cfg.faults = [](rank_id r) {
      return r == 1 ? one_fault(fault_target::load, fault_action::fail_at_submit, 1) : fault_plan{};
    };
    auto m = make_model(cfg);
    ASSERT_NE(m, nullptr);
    name = m->scheduler().segment_name();
    const tokens a = seq(36, 1000);
    m->add_request({"a", a, 1});
    run_clean(*m);
    // Each rank wrote its own bytes into its own region: the slot contents differ.
    const cpu_slot s0 = 0;
    const auto slot0 = m->scheduler().pool_slot(0, s0);
    const auto slot1 = m->scheduler().pool_slot(1, s0);
    ASSERT_EQ(slot0.size(), 3 * k_block_bytes);
    ASSERT_EQ(slot1.size(), slot0.size());
    EXPECT_NE(std::memcmp(slot0.data(), slot1.data(), slot0.size()), 0);

    for (const char* id : {"b", "c"}) {
      m->reset_prefix_cache();
      m->add_request({id, plus(a, {static_cast<uint32_t>(id[0])}), 2});
      auto r = step_ok(*m);
      ASSERT_EQ(r.meta.loads.size(), 1u);
      ASSERT_EQ(r.rank_outputs.size(), 2u);
      const bool fails = std::string(id) == "c";
      EXPECT_TRUE(r.rank_outputs[0].jobs.at(0).ok);
      EXPECT_EQ(r.rank_outputs[1].jobs.at(0).ok, !fails);
      ASSERT_EQ(r.output.jobs.size(), 1u);
      EXPECT_EQ(r.output.jobs[0].ok, !fails);  // one failed rank fails the job
      EXPECT_EQ(r.completions.invalid_block_ids.empty(), !fails);
      run_clean(*m);
    }
    EXPECT_EQ(m->stats().tokens_loaded, 36u);       // b
    EXPECT_EQ(m->stats().tokens_invalidated, 36u);  // c, recomputed on both ranks
    expect_drained(*m);
  }
  auto exists = shm::segment::exists(name);
  ASSERT_TRUE(exists.ok());
  EXPECT_FALSE(*exists);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous transfers (no step-end wait): completions arrive steps later, in an order the
// test chooses. The order changes the schedule, never the content or the final state.

TEST_F(EngineLoopTest, AsyncTransfersWithPreemptionsAndEvictionsStayExact) {
  engine_config cfg;
  cfg.num_gpu_blocks = 18;
  cfg.cpu_slots = 8;
  auto m = make_model(cfg);
  ASSERT_NE(m, nullptr);
  const std::vector<tokens> docs{seq(36, 1000), seq(30, 2000), seq(26, 3000), seq(40, 4000)};
  for (uint32_t d = 0; d < 2; ++d) m->add_request({"warm" + std::to_string(d), docs[d], 1});
  run_clean(*m);  // some stored prefixes to load below
  m->set_wait_at_step_end(false);
  for (uint32_t i = 0; i < 16; ++i) {
    if (i % 4 == 0) m->reset_prefix_cache();
    const tokens& doc = docs[i % docs.size()];
    tokens p = head(doc, 10 + (i * 7) % (doc.size() - 9));
    p.push_back(50000 + i);
    m->add_request({"r" + std::to_string(i), p, 4 + i % 8});
    if (i % 4 == 3) {
      for (int s = 0; s < 3; ++s) {
        step_ok(*m);
        // Some transfers complete between steps: one store or one load, alternately.
        m->engine(0).advance(s % 2 == 0 ? cuda::direction::gpu_to_cpu
                                        : cuda::direction::cpu_to_gpu);
      }
    }
  }
  m->abort("r5");
  m->abort("r14");
  run_clean(*m, 2000);
  expect_drained(*m);
  EXPECT_GT(m->stats().tokens_loaded, 0u);
  EXPECT_GT(m->stats().verified_tokens, 0u);
}

}  // namespace
}  // namespace kvc::testing
