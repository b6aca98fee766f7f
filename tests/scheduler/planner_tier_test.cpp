// The planner with a file tier (planner.hpp "File tier"): cascades after stores, lookups that
// ask again while files are checked, promotions completed like stores and then loaded, failures
// as misses, back-pressure and capacity, over the real offload manager and ledger.
#include "actors/channel/wire_codec.hpp"
#include "actors/scheduler/planner.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kvc::scheduler {
namespace {

constexpr uint32_t kBlock = 4;  // tokens per GPU, offloaded and hash block (factor 1)

/// A request of `n` full blocks whose keys are block_key::from_index(first + i).
struct tier_request {
  std::string id;
  std::vector<block_key> keys;
  request_view view() const { return {id, keys, static_cast<uint32_t>(keys.size() * kBlock)}; }
};

tier_request request(std::string id, uint64_t first, size_t n) {
  tier_request r{std::move(id), {}};
  for (size_t i = 0; i < n; ++i) r.keys.push_back(block_key::from_index(first + i));
  return r;
}

std::vector<block_key> keys_of(const tier_job& j) {
  return j.keys;
}

class PlannerTierTest : public ::testing::Test {
 protected:
  void make(uint32_t pool_blocks, uint32_t tier_blocks, uint32_t max_pending = 8,
            bool with_tier = true, bool events = true) {
    planner_config cfg;
    cfg.gpu_block_size = kBlock;
    cfg.manager.capacity = pool_blocks;
    cfg.manager.enable_events = events;
    if (with_tier) {
      cfg.file_tier = file_tier_limits{.capacity_bytes = tier_blocks * 100ull,
                                       .block_file_bytes = 100,
                                       .max_pending_cascades = max_pending};
    }
    auto p = planner::create(cfg);
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    p_ = std::move(*p);
  }

  connector_metadata step(std::vector<scheduled_request> fresh = {}) {
    auto m = p_->build_connector_meta(step_input{step_++, fresh, {}, {}});
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? std::move(*m) : connector_metadata{};
  }

  void complete(job_id id, transfer_kind kind, bool ok = true) {
    auto s = p_->update_connector_output(connector_output{step_, {job_result{id, kind, ok}}});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  void complete(const tier_job& j, bool ok = true) { complete(j.id, j.kind, ok); }

  /// Prefills r whole (no hit), stores every block, finishes it; returns the store step's
  /// metadata (its store job completed ok).
  connector_metadata store(const tier_request& r) {
    EXPECT_EQ(p_->get_num_new_matched_tokens(r.view(), 0), (match_result{0u, false}));
    std::vector<gpu_block> blocks;
    for (size_t i = 0; i < r.keys.size(); ++i) blocks.push_back(next_block_++);
    const auto tokens = static_cast<uint32_t>(r.keys.size() * kBlock);
    auto m = step({scheduled_request{r.view(), blocks, 0, tokens, false}});
    EXPECT_EQ(m.stores.size(), 1u);
    for (const auto& j : m.stores) complete(j.id, j.kind);
    EXPECT_TRUE(p_->request_finished(r.id));
    (void)p_->update_connector_output(connector_output{step_, {}});  // releases it
    (void)p_->take_request_completions();
    return m;
  }

  /// The single tier job of kind `kind` in the next metadata.
  tier_job next_tier_job(transfer_kind kind) {
    auto m = step();
    EXPECT_EQ(m.tier_jobs.size(), 1u);
    if (m.tier_jobs.size() != 1) return {};
    EXPECT_EQ(m.tier_jobs[0].kind, kind);
    return m.tier_jobs[0];
  }

  /// Stores r and completes its cascade.
  void store_and_cascade(const tier_request& r) {
    store(r);
    complete(next_tier_job(transfer_kind::cascade));
  }

  std::unique_ptr<planner> p_;
  step_id step_ = 0;
  gpu_block next_block_ = 1;
};

TEST(TierJobWireTest, TierJobsAndRemovedFilesSurviveTheStepChannel) {
  connector_metadata meta;
  meta.step = 3;
  meta.tier_jobs.push_back(tier_job{.id = 4,
                                    .kind = transfer_kind::cascade,
                                    .slots = {1, 2},
                                    .keys = {block_key{1, 2}, block_key{3, 4}}});
  meta.tier_jobs.push_back(
      tier_job{.id = 5, .kind = transfer_kind::check, .slots = {}, .keys = {block_key{5, 6}}});
  meta.tier_removed = {block_key{7, 8}};
  auto back = channel::decode_metadata(channel::encode(meta));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, meta);

  meta.tier_jobs[0].slots = {1};  // a slot short
  auto bad = channel::decode_metadata(channel::encode(meta));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::protocol_mismatch);
  meta.tier_jobs[0].slots = {1, 2};
  meta.tier_jobs[1].kind = transfer_kind::load;  // not a tier kind
  EXPECT_FALSE(channel::decode_metadata(channel::encode(meta)).ok());
}

TEST_F(PlannerTierTest, WithoutATierNoTierJobsAndNothingCounted) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/0, 8, /*with_tier=*/false);
  const auto a = request("a", 0, 2);
  store(a);
  store(request("b", 10, 2));  // evicts a
  auto m = step();
  EXPECT_TRUE(m.tier_jobs.empty());
  EXPECT_TRUE(m.tier_removed.empty());
  EXPECT_FALSE(p_->has_file_tier());
  EXPECT_EQ(p_->tier(), nullptr);
  EXPECT_EQ(p_->tier_counters(), file_tier_counters{});
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{0u, false}));
}

TEST_F(PlannerTierTest, ACompletedStoreCascadesWhileItsSlotsStayPinned) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  const auto sm = store(a);
  const tier_job c = next_tier_job(transfer_kind::cascade);
  EXPECT_EQ(keys_of(c), a.keys);
  EXPECT_EQ(c.slots, sm.stores[0].slots);  // the slots the store filled
  EXPECT_EQ(p_->manager().busy(), 2u);     // pinned: the bytes go to disk first

  // While the cascade runs, no store can evict a's slots.
  const auto b = request("b", 10, 2);
  EXPECT_EQ(p_->get_num_new_matched_tokens(b.view(), 0), (match_result{0u, false}));
  auto m = step({scheduled_request{b.view(), std::vector<gpu_block>{50, 51}, 0, 8, false}});
  EXPECT_TRUE(m.stores.empty());
  EXPECT_EQ(p_->stats().store_retries, 1u);

  complete(c);
  EXPECT_EQ(p_->manager().busy(), 0u);
  EXPECT_TRUE(p_->tier()->ready(a.keys[0]));
  EXPECT_TRUE(p_->tier()->ready(a.keys[1]));
  const auto ev = p_->take_tier_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kv_event_kind::stored);
  EXPECT_EQ(ev[0].where, medium::fs);
  EXPECT_EQ(ev[0].keys, a.keys);
  const auto t = p_->tier_counters();
  EXPECT_EQ(t.cascade_jobs, 1u);
  EXPECT_EQ(t.cascaded_blocks, 2u);
  EXPECT_EQ(t.ledger.cascades_ok, 2u);
}

TEST_F(PlannerTierTest, AResetIsRefusedWithATierAndChangesNothing) {
  make(/*pool_blocks=*/4, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  (void)store(a);
  const size_t pool_before = p_->manager().size();
  const auto st = p_->reset();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), errc::precondition_failed);
  EXPECT_NE(st.message().find("file tier"), std::string::npos) << st.message();
  EXPECT_EQ(p_->manager().size(), pool_before);
  EXPECT_EQ(p_->stats().resets, 0u);
  EXPECT_EQ(p_->tables().reset_flush, 0u);
}

TEST_F(PlannerTierTest, AskAgainThenHitThenPromotionThenLoad) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  store_and_cascade(a);
  store_and_cascade(request("b", 10, 2));  // evicts a from the pool
  const auto a2 = request("a2", 0, 2);     // a's prefix again

  // Missed by the pool, held by the tier: both files are checked at once, the answer waits.
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  auto m = step();
  ASSERT_EQ(m.tier_jobs.size(), 2u);
  for (const auto& j : m.tier_jobs) EXPECT_EQ(j.kind, transfer_kind::check);
  EXPECT_EQ(keys_of(m.tier_jobs[0]), std::vector<block_key>{a.keys[0]});
  EXPECT_EQ(keys_of(m.tier_jobs[1]), std::vector<block_key>{a.keys[1]});
  for (const auto& j : m.tier_jobs) complete(j);

  // Found: a promotion into pool slots, the answer still waits for it.
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  const tier_job pr = next_tier_job(transfer_kind::promotion);
  EXPECT_EQ(keys_of(pr), a.keys);
  EXPECT_EQ(pr.slots.size(), 2u);
  EXPECT_EQ(p_->tier()->readers(a.keys[0]), 1u);
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  EXPECT_TRUE(step().tier_jobs.empty());  // no second promotion of the same blocks
  complete(pr);

  // Now a pool hit, loaded as usual from the promoted slots.
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{8u, true}));
  const std::vector<gpu_block> blocks{70, 71};
  ASSERT_TRUE(p_->update_state_after_alloc(a2.view(), blocks, 8).ok());
  m = step();
  ASSERT_EQ(m.loads.size(), 1u);
  EXPECT_EQ(m.loads[0].slots, pr.slots);
  EXPECT_EQ(m.loads[0].gpu_blocks, blocks);
  complete(m.loads[0].id, transfer_kind::load);
  EXPECT_EQ(p_->take_request_completions().finished_recving, std::vector<std::string>{"a2"});
  EXPECT_FALSE(p_->request_finished("a2"));

  const auto t = p_->tier_counters();
  EXPECT_EQ(t.check_jobs, 2u);
  EXPECT_EQ(t.promotion_jobs, 1u);
  EXPECT_EQ(t.promoted_blocks, 2u);
  EXPECT_EQ(t.asked_again, 4u);
  EXPECT_EQ(t.ledger.promotions_ok, 2u);
  EXPECT_EQ(t.ledger.hits, 2u);
  EXPECT_EQ(p_->tier()->readers(a.keys[0]), 0u);
  (void)step();  // tells the workers a2 finished
  EXPECT_EQ(p_->tables(), planner_tables{});
  EXPECT_EQ(p_->manager().busy(), 0u);
}

TEST_F(PlannerTierTest, AFailedPromotionIsAMissAndItsFilesAreRemoved) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  store_and_cascade(a);
  store_and_cascade(request("b", 10, 2));
  const auto a2 = request("a2", 0, 2);
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  for (const auto& j : step().tier_jobs) complete(j);
  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{std::nullopt, false}));
  const tier_job pr = next_tier_job(transfer_kind::promotion);
  complete(pr, /*ok=*/false);  // e.g. a corrupt file on one rank

  EXPECT_EQ(p_->get_num_new_matched_tokens(a2.view(), 0), (match_result{0u, false}));
  EXPECT_EQ(p_->manager().size(), 0u);  // the promotion's slots are free again
  EXPECT_FALSE(p_->tier()->ready(a.keys[0]));
  // Another rank may still be reading a's files into those slots: the next metadata flushes
  // the promotion, once.
  const auto m = step();
  EXPECT_TRUE(m.tier_jobs.empty());
  EXPECT_EQ(m.tier_removed, a.keys);
  EXPECT_EQ(m.flush, std::vector<job_id>{pr.id});
  EXPECT_EQ(p_->tier_counters().ledger.promotions_failed, 2u);
  EXPECT_FALSE(p_->request_finished("a2"));
  EXPECT_TRUE(step().flush.empty());
  EXPECT_EQ(p_->tables(), planner_tables{});
}

TEST_F(PlannerTierTest, AFileCheckThatFailsDropsTheBlock) {
  make(/*pool_blocks=*/1, /*tier_blocks=*/8);
  const auto a = request("a", 0, 1);
  store_and_cascade(a);
  store_and_cascade(request("b", 10, 1));
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{std::nullopt, false}));
  const tier_job check = next_tier_job(transfer_kind::check);
  complete(check, /*ok=*/false);  // the file is gone
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{0u, false}));
  const auto m = step();
  EXPECT_EQ(m.tier_removed, a.keys);
  EXPECT_EQ(m.flush, std::vector<job_id>{check.id});  // before the removals run
  EXPECT_EQ(p_->tier_counters().ledger.dropped_bad_file, 1u);
}

TEST_F(PlannerTierTest, AFailedCascadeDropsTheBlockAndUnpinsIt) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  store(a);
  const tier_job c = next_tier_job(transfer_kind::cascade);
  complete(c, /*ok=*/false);  // e.g. ENOSPC
  EXPECT_EQ(p_->manager().busy(), 0u);
  EXPECT_EQ(p_->tier()->size(), 0u);
  // Another rank may still be writing the unpinned slots to files: flushed (before the removals
  // and the step's stores and tier jobs start), once.
  const auto m = step();
  EXPECT_EQ(m.tier_removed, a.keys);  // a partial file, if any, goes
  EXPECT_EQ(m.flush, std::vector<job_id>{c.id});
  EXPECT_TRUE(step().flush.empty());
  EXPECT_EQ(p_->tier_counters().ledger.cascades_failed, 2u);
  // Still in the pool: a pool hit.
  EXPECT_EQ(p_->get_num_new_matched_tokens(request("a2", 0, 2).view(), 0),
            (match_result{8u, true}));
}

TEST_F(PlannerTierTest, BackPressureSkipsAndCountsCascades) {
  make(/*pool_blocks=*/8, /*tier_blocks=*/8, /*max_pending=*/1);
  const auto a = request("a", 0, 3);
  store(a);
  const tier_job c = next_tier_job(transfer_kind::cascade);
  EXPECT_EQ(keys_of(c), std::vector<block_key>{a.keys[0]});
  EXPECT_EQ(p_->manager().busy(), 1u);  // only the accepted block is pinned
  const auto t = p_->tier_counters();
  EXPECT_EQ(t.ledger.cascades_offered, 3u);
  EXPECT_EQ(t.ledger.cascades_skipped_queue_full, 2u);
  complete(c);
  EXPECT_EQ(p_->manager().busy(), 0u);
}

TEST_F(PlannerTierTest, TheTierEvictsForItsCapacityAndRemovesTheFiles) {
  make(/*pool_blocks=*/8, /*tier_blocks=*/2);
  const auto a = request("a", 0, 2);
  store_and_cascade(a);
  (void)p_->take_tier_events();
  const auto b = request("b", 10, 2);
  store(b);
  const auto m = step();
  ASSERT_EQ(m.tier_jobs.size(), 1u);
  EXPECT_EQ(keys_of(m.tier_jobs[0]), b.keys);
  EXPECT_EQ(m.tier_removed, a.keys);
  complete(m.tier_jobs[0]);
  const auto ev = p_->take_tier_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, kv_event_kind::removed);
  EXPECT_EQ(ev[0].keys, a.keys);
  EXPECT_EQ(ev[1].kind, kv_event_kind::stored);
  EXPECT_EQ(p_->tier_counters().ledger.evictions, 2u);
}

TEST_F(PlannerTierTest, BlocksAdoptedAtARestartArePromoted) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  const auto a = request("a", 0, 2);
  p_->adopt_tier_blocks(a.keys);
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{std::nullopt, false}));
  for (const auto& j : step().tier_jobs) complete(j);
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{std::nullopt, false}));
  complete(next_tier_job(transfer_kind::promotion));
  EXPECT_EQ(p_->get_num_new_matched_tokens(a.view(), 0), (match_result{8u, true}));
}

TEST_F(PlannerTierTest, AResultOfTheWrongKindForATierJobIsRejected) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8);
  store(request("a", 0, 2));
  const tier_job c = next_tier_job(transfer_kind::cascade);
  auto s = p_->update_connector_output(
      connector_output{step_, {job_result{c.id, transfer_kind::promotion, true}}});
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_EQ(p_->manager().busy(), 2u);  // still in flight
  complete(c);
  EXPECT_EQ(p_->manager().busy(), 0u);
}

TEST_F(PlannerTierTest, WithoutEventsTheTiersEventsAreNotKept) {
  make(/*pool_blocks=*/2, /*tier_blocks=*/8, 8, /*with_tier=*/true, /*events=*/false);
  store_and_cascade(request("a", 0, 2));
  (void)step();
  EXPECT_TRUE(p_->take_tier_events().empty());
  EXPECT_EQ(p_->tier_counters().ledger.cascades_ok, 2u);
}

}  // namespace
}  // namespace kvc::scheduler
