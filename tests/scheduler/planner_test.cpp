// Scheduler side of the connector: the scheduler-observable parts of the reference's connector
// scenarios (§9 items 19-28 and 33) plus failure handling, driven by a small deterministic
// engine stand-in over the real offload manager wrapped in a recording decorator.
#include "actors/scheduler/planner.hpp"
#include "actors/channel/wire_codec.hpp"
#include "actors/scheduler/forwarding_manager.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace kvc::scheduler {
namespace {

// Geometry of the reference tests: GPU blocks of 4 tokens, offloaded blocks of 12 (factor 3),
// request block hashes per GPU block (hash_factor 3).
constexpr uint32_t kGpu = 4;
constexpr uint32_t kObs = 12;

/// Forwards to a real manager and records every call (EnvWrapper-style). Fault injection:
/// refuse_store makes prepare_store answer nullopt; store_only lets prepare_store see only
/// those of its keys (so the real manager stores a subset).
class recording_manager final : public forwarding_manager {
 public:
  struct call {
    std::string op;
    std::vector<block_key> keys;
  };

  explicit recording_manager(std::unique_ptr<offload_manager> inner)
      : forwarding_manager(std::move(inner)) {}

  bool lookup(const block_key& key) override {
    calls.push_back({"lookup", {key}});
    return inner().lookup(key);
  }
  uint32_t lookup_prefix(std::span<const block_key> keys) override {
    // Recorded as the single lookups it stands for (up to and including the first miss).
    const uint32_t hits = inner().lookup_prefix(keys);
    for (size_t i = 0; i < keys.size() && i <= hits; ++i) calls.push_back({"lookup", {keys[i]}});
    return hits;
  }
  result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> keys) override {
    record("prepare_load", keys);
    return inner().prepare_load(keys);
  }
  status complete_load(std::span<const block_key> keys) override {
    record("complete_load", keys);
    return inner().complete_load(keys);
  }
  void touch(std::span<const block_key> keys) override {
    record("touch", keys);
    inner().touch(keys);
  }
  void touch_hinted(std::span<const block_key> keys, std::span<cpu_slot> hints) override {
    record("touch", keys);  // the touch it is
    inner().touch_hinted(keys, hints);
  }
  std::optional<store_plan> prepare_store(std::span<const block_key> keys) override {
    record("prepare_store", keys);
    if (refuse_store) return std::nullopt;
    if (store_only) {
      filtered_.clear();
      for (const auto& k : keys) {
        if (std::find(store_only->begin(), store_only->end(), k) != store_only->end())
          filtered_.push_back(k);
      }
      return inner().prepare_store(filtered_);
    }
    return inner().prepare_store(keys);
  }
  void complete_store(std::span<const block_key> keys, bool success) override {
    record(success ? "complete_store" : "complete_store_failed", keys);
    inner().complete_store(keys, success);
  }
  void reset() override {
    record("reset", {});
    inner().reset();
  }

  size_t count(std::string_view op) const {
    return static_cast<size_t>(
        std::count_if(calls.begin(), calls.end(), [&](const call& c) { return c.op == op; }));
  }
  /// The keys of the last call of `op` (empty when there was none).
  std::vector<block_key> last(std::string_view op) const {
    for (auto it = calls.rbegin(); it != calls.rend(); ++it) {
      if (it->op == op) return it->keys;
    }
    return {};
  }
  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const auto& c : calls) out.push_back(c.op);
    return out;
  }
  /// Ask the real manager directly (not recorded).
  bool hits(const block_key& k) { return inner().lookup(k); }

  std::vector<call> calls;
  bool refuse_store = false;
  std::optional<std::vector<block_key>> store_only;

 private:
  void record(const char* op, std::span<const block_key> keys) {
    calls.push_back({op, std::vector<block_key>(keys.begin(), keys.end())});
  }

  std::vector<block_key> filtered_;
};

/// An engine request: token ids, chained hashes per full GPU block, and its GPU blocks.
struct test_request {
  std::string id;
  std::vector<uint32_t> tokens;
  std::vector<block_key> hashes;
  std::vector<gpu_block> blocks;
  bool remote_decode = false;

  test_request(std::string name, std::vector<uint32_t> toks)
      : id(std::move(name)), tokens(std::move(toks)) {
    rehash();
  }

  void append(uint32_t n, uint32_t value = 7) {
    tokens.insert(tokens.end(), n, value);
    rehash();
  }
  /// Allocates blocks (ids from `next`) until `n_tokens` tokens fit; returns the new ones.
  std::vector<gpu_block> alloc(size_t n_tokens, gpu_block& next) {
    std::vector<gpu_block> fresh;
    while (blocks.size() * kGpu < n_tokens) {
      blocks.push_back(next);
      fresh.push_back(next++);
    }
    return fresh;
  }
  request_view view() const {
    return {id, hashes, static_cast<uint32_t>(tokens.size()), remote_decode};
  }
  /// The offloaded keys: the last hash of every full offloaded block.
  std::vector<block_key> keys() const {
    std::vector<block_key> out;
    for (size_t i = kObs / kGpu - 1; i < hashes.size(); i += kObs / kGpu) out.push_back(hashes[i]);
    return out;
  }

 private:
  void rehash() {
    while ((hashes.size() + 1) * kGpu <= tokens.size()) {
      uint64_t h = hashes.empty() ? 0x1234 : hashes.back().hi;
      for (size_t t = hashes.size() * kGpu; t < (hashes.size() + 1) * kGpu; ++t)
        h = block_key::mix(h ^ tokens[t]);
      hashes.push_back({h, block_key::mix(h + 1)});
    }
  }
};

std::vector<uint32_t> prompt(size_t n, uint32_t first) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + static_cast<uint32_t>(i);
  return t;
}

std::vector<block_key> slice(const std::vector<block_key>& v, size_t b, size_t e) {
  return {v.begin() + static_cast<std::ptrdiff_t>(b), v.begin() + static_cast<std::ptrdiff_t>(e)};
}

std::vector<gpu_block> slice_ids(const std::vector<gpu_block>& v, size_t b, size_t e) {
  return {v.begin() + static_cast<std::ptrdiff_t>(b), v.begin() + static_cast<std::ptrdiff_t>(e)};
}

class PlannerTest : public ::testing::Test {
 protected:
  void SetUp() override { make(/*capacity=*/64, /*prefix_caching=*/true); }

  void make(uint32_t capacity, bool prefix_caching) {
    planner_config cfg;
    cfg.gpu_block_size = kGpu;
    cfg.offloaded_block_size = kObs;
    cfg.hash_block_size = kGpu;
    cfg.enable_prefix_caching = prefix_caching;
    manager_config mc;
    mc.capacity = capacity;
    auto inner = offload_manager::create(mc);
    ASSERT_TRUE(inner.ok()) << inner.error().to_string();
    auto rec = std::make_unique<recording_manager>(std::move(*inner));
    mgr_ = rec.get();
    auto cs = planner::create(cfg, std::move(rec));
    ASSERT_TRUE(cs.ok()) << cs.error().to_string();
    planner_ = std::move(*cs);
  }

  static scheduled_request fresh(const test_request& r, uint32_t computed, uint32_t scheduled) {
    return {r.view(), r.blocks, computed, scheduled, false};
  }
  static scheduled_request running(const test_request& r, const std::vector<gpu_block>& new_ids,
                                   uint32_t computed, uint32_t scheduled, bool resumed = false) {
    return {r.view(), new_ids, computed, scheduled, resumed};
  }

  connector_metadata step(std::vector<scheduled_request> fresh_reqs,
                          std::vector<scheduled_request> cached = {},
                          std::vector<std::string_view> preempted = {}) {
    step_input in{step_++, fresh_reqs, cached, preempted};
    auto m = planner_->build_connector_meta(in);
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? std::move(*m) : connector_metadata{};
  }

  void complete(const transfer_job& j, bool ok = true) {
    connector_output out{step_, {job_result{j.id, j.kind, ok}}};
    auto s = planner_->update_connector_output(out);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  /// Runs r's whole prompt as one prefill, stores every block and finishes it.
  void store_fully(test_request& r) {
    (void)planner_->get_num_new_matched_tokens(r.view(), 0);
    r.alloc(r.tokens.size(), next_block_);
    auto m = step({fresh(r, 0, static_cast<uint32_t>(r.tokens.size()))});
    for (const auto& j : m.stores) complete(j);
    // R1: a request that ever stored is held until finished_sending, which the next output
    // brings even though every store already completed.
    EXPECT_TRUE(planner_->request_finished(r.id));
    release_owed();
    (void)planner_->take_request_completions();
  }

  /// `r` (16 tokens whose first 12 are a stored block's): looked up (a 12-token hit),
  /// allocated and its load recorded for the next metadata.
  void record_load_of_12(test_request& r) {
    EXPECT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
    r.alloc(16, next_block_);
    EXPECT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
  }
  /// The same, then the step that sends the load: that load (empty when none was sent).
  transfer_job send_load_of_12(test_request& r) {
    record_load_of_12(r);
    const auto loads = step({}).loads;
    EXPECT_EQ(loads.size(), 1u);
    return loads.empty() ? transfer_job{} : loads[0];
  }

  /// An output with no job results: releases finished requests owed finished_sending.
  void release_owed() {
    auto s = planner_->update_connector_output(connector_output{step_, {}});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  recording_manager* mgr_ = nullptr;
  std::unique_ptr<planner> planner_;
  step_id step_ = 0;
  gpu_block next_block_ = 1;  // 0 is the null block
};

// --- geometry -----------------------------------------------------------------------------

TEST(ConnectorGeometryTest, DerivesFactorsAndRejectsBadSizes) {
  planner_config cfg;
  cfg.gpu_block_size = 16;
  cfg.offloaded_block_size = 64;
  cfg.hash_block_size = 16;
  auto g = make_geometry(cfg);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->factor, 4u);
  EXPECT_EQ(g->hash_factor, 4u);
  EXPECT_EQ(g->offloaded_block_size, 64u);

  cfg.offloaded_block_size = 0;  // defaults to the GPU block size
  cfg.hash_block_size = 0;
  g = make_geometry(cfg);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->factor, 1u);
  EXPECT_EQ(g->hash_factor, 1u);

  cfg.offloaded_block_size = 40;  // not a multiple of 16
  g = make_geometry(cfg);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.code(), errc::invalid_argument);
  EXPECT_NE(g.error().message().find("40"), std::string::npos);

  cfg.offloaded_block_size = 48;
  cfg.hash_block_size = 32;  // 48 is not a multiple of 32
  EXPECT_EQ(make_geometry(cfg).code(), errc::invalid_argument);

  cfg.gpu_block_size = 0;
  EXPECT_EQ(make_geometry(cfg).code(), errc::invalid_argument);

  planner_config bad;
  bad.gpu_block_size = 16;
  bad.offloaded_block_size = 24;
  bad.manager.capacity = 8;
  EXPECT_EQ(planner::create(bad).code(), errc::invalid_argument);
  bad.offloaded_block_size = 32;
  bad.manager.capacity = 0;  // the manager's own validation
  EXPECT_FALSE(planner::create(bad).ok());
  bad.manager.capacity = 8;
  EXPECT_TRUE(planner::create(bad).ok());
  EXPECT_EQ(planner::create(bad, nullptr).code(), errc::invalid_argument);
}

// A job's per-KV-cache-group values are inline: up to max_kv_cache_groups, compared by value.
TEST(PerGroupTest, HoldsUpToTheGroupLimitAndComparesByValue) {
  per_group g;
  EXPECT_TRUE(g.empty());
  for (uint32_t i = 0; i < max_kv_cache_groups; ++i) EXPECT_TRUE(g.push_back(10 + i));
  EXPECT_FALSE(g.push_back(99));  // full: unchanged
  EXPECT_EQ(g.size(), max_kv_cache_groups);
  EXPECT_EQ(g, (per_group{10, 11, 12, 13}));
  EXPECT_NE(g, (per_group{10, 11, 12}));
  EXPECT_EQ(std::vector<uint32_t>(g.begin(), g.end()), (std::vector<uint32_t>{10, 11, 12, 13}));
  EXPECT_EQ(per_group{}, per_group{});
}

// The planner's metadata crosses processes: its per-group job fields and the flushed requests
// survive the step channel's wire codec (CAF's serialiser through the inspect overloads).
TEST(ConnectorMetadataWireTest, GroupFieldsAndFlushedRequestsSurviveTheStepChannel) {
  connector_metadata meta;
  meta.step = 12;
  transfer_job job;
  job.id = 7;
  job.request_id = "r3";
  job.kind = transfer_kind::load;
  job.slots = {4, 5};
  job.gpu_blocks = {11, 12, 13};
  job.skip = 1;
  job.group_sizes = {3};
  job.block_indices = {5};
  meta.loads.push_back(job);
  job.group_sizes = {3, 2, 1, 9};  // every group slot used
  job.block_indices = {};
  meta.stores.push_back(job);
  meta.flush = {2, 3};
  meta.flush_requests = {"r1", "r9"};
  auto back = channel::decode_metadata(channel::encode(meta));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(*back, meta);
  EXPECT_EQ(back->loads[0].block_indices, per_group{5});
  EXPECT_EQ(back->stores[0].group_sizes, (per_group{3, 2, 1, 9}));
  EXPECT_EQ(back->flush_requests, (std::vector<std::string>{"r1", "r9"}));
}

// --- lookups (§9 items 21, 22) ------------------------------------------------------------

TEST_F(PlannerTest, NoLookupWhenLessThanOneOffloadedBlockIsNew) {
  test_request a{"a", prompt(12, 1)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(a.view(), 4), (match_result{0u, false}));
  EXPECT_EQ(mgr_->count("lookup"), 0u);
  EXPECT_EQ(mgr_->ops(), std::vector<std::string>{"touch"});

  mgr_->calls.clear();
  test_request b{"b", prompt(12, 100)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{0u, false}));
  // touch before the lookup, then exactly one lookup (the first key misses).
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"touch", "lookup"}));
  EXPECT_EQ(mgr_->last("lookup"), b.keys());
  EXPECT_EQ(planner_->stats().lookups, 1u);
}

TEST_F(PlannerTest, KeysAreTheLastHashOfEachOffloadedBlock) {
  test_request a{"a", prompt(60, 1)};
  a.append(12, 99);  // 72 tokens: 6 offloaded blocks, the 6th differs from c's
  test_request c{"c", prompt(72, 1)};
  ASSERT_EQ(a.hashes.size(), 18u);
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  auto touched = mgr_->last("touch");
  ASSERT_EQ(touched.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(touched[i], a.hashes[3 * i + 2]);
  (void)planner_->get_num_new_matched_tokens(c.view(), 0);
  auto touched_c = mgr_->last("touch");
  ASSERT_EQ(touched_c.size(), 6u);
  EXPECT_EQ(slice(touched_c, 0, 5), slice(touched, 0, 5));
  EXPECT_NE(touched_c[5], touched[5]);
}

// --- stores (§9 items 19-21) --------------------------------------------------------------

TEST_F(PlannerTest, StoreCursorFollowsPrepareStoreOutcomes) {
  test_request a{"a", prompt(36, 1)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(a.view(), 0), (match_result{0u, false}));
  a.alloc(36, next_block_);  // GPU 1..9
  const auto k = [&] { return a.keys(); };

  // Item 19: prepare_store stores only keys[1]: its GPU blocks 4,5,6 make the one store job.
  mgr_->store_only = std::vector<block_key>{k()[1]};
  mgr_->calls.clear();
  auto m = step({fresh(a, 0, 36)});
  EXPECT_EQ(mgr_->last("prepare_store"), slice(k(), 0, 3));
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].kind, transfer_kind::store);
  EXPECT_EQ(m.stores[0].request_id, "a");
  EXPECT_EQ(m.stores[0].gpu_blocks, (std::vector<gpu_block>{4, 5, 6}));
  EXPECT_EQ(m.stores[0].slots.size(), 1u);
  EXPECT_EQ(m.stores[0].skip, 0u);
  // vLLM's GPULoadStoreSpec: one group of 3 blocks starting at block-table index 3.
  EXPECT_EQ(m.stores[0].group_sizes, per_group{3});
  EXPECT_EQ(m.stores[0].block_indices, per_group{3});
  EXPECT_TRUE(m.loads.empty());
  EXPECT_TRUE(m.flush.empty());
  complete(m.stores[0]);
  mgr_->store_only.reset();

  // Item 20: 11 more tokens: 47 < 48, prepare_store is not called.
  a.append(11);
  auto ids = a.alloc(47, next_block_);
  mgr_->calls.clear();
  m = step({}, {running(a, ids, 36, 11)});
  EXPECT_EQ(mgr_->count("prepare_store"), 0u);
  EXPECT_TRUE(m.stores.empty());

  // +1 token with a full pool: prepare_store is called and the cursor stays.
  a.append(1);
  mgr_->refuse_store = true;
  mgr_->calls.clear();
  m = step({}, {running(a, {}, 47, 1)});
  EXPECT_EQ(mgr_->count("prepare_store"), 1u);
  EXPECT_EQ(mgr_->last("prepare_store"), slice(k(), 3, 4));
  EXPECT_TRUE(m.stores.empty());
  EXPECT_EQ(planner_->stats().store_retries, 1u);
  mgr_->refuse_store = false;

  // +13 with an empty store result: block 3 is retried with block 4, then the cursor moves.
  a.append(13);
  ids = a.alloc(61, next_block_);
  mgr_->store_only = std::vector<block_key>{};
  mgr_->calls.clear();
  m = step({}, {running(a, ids, 48, 13)});
  EXPECT_EQ(mgr_->last("prepare_store"), slice(k(), 3, 5));
  EXPECT_TRUE(m.stores.empty());
  EXPECT_EQ(mgr_->count("touch"), 0u);  // nothing stored: no touch
  mgr_->store_only.reset();

  // +13: stores block 5 (GPU 16,17,18) and touches all 6 keys.
  a.append(13);
  ids = a.alloc(74, next_block_);
  mgr_->calls.clear();
  m = step({}, {running(a, ids, 61, 13)});
  EXPECT_EQ(mgr_->last("prepare_store"), slice(k(), 5, 6));
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks, (std::vector<gpu_block>{16, 17, 18}));
  EXPECT_EQ(mgr_->last("touch"), k());
  EXPECT_EQ(mgr_->last("touch").size(), 6u);
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"prepare_store", "touch"}));
}

// Running requests are matched by id whatever order the engine schedules them in (the
// connector predicts the order from the previous step; a wrong guess must not matter).
TEST_F(PlannerTest, RunningRequestsAreMatchedByIdInAnyOrder) {
  std::vector<test_request> reqs;
  for (uint32_t i = 0; i < 4; ++i) reqs.emplace_back("r" + std::to_string(i), prompt(12, 100 * i));
  std::vector<scheduled_request> first;
  for (auto& r : reqs) {
    (void)planner_->get_num_new_matched_tokens(r.view(), 0);
    r.alloc(12, next_block_);
  }
  for (auto& r : reqs) first.push_back(fresh(r, 0, 12));
  for (const auto& j : step(first).stores) complete(j);
  // Each step, the scheduled requests fill one more offloaded block each (12 tokens), in a
  // different order every step; r3 finishes after the second step and r4 takes its place.
  const std::vector<std::vector<size_t>> orders{{0, 1, 2, 3}, {3, 1, 0, 2}, {2}, {1, 0, 2}};
  std::vector<uint32_t> computed(reqs.size(), 12);
  for (size_t o = 0; o < orders.size(); ++o) {
    if (o == 2) {
      EXPECT_TRUE(planner_->request_finished("r3"));  // it stored: held until finished_sending
      reqs.emplace_back("r4", prompt(12, 900));
      (void)planner_->get_num_new_matched_tokens(reqs.back().view(), 0);
      reqs.back().alloc(12, next_block_);
      computed.push_back(12);
      for (const auto& j : step({fresh(reqs.back(), 0, 12)}).stores) complete(j);
    }
    std::vector<scheduled_request> cached;
    std::vector<std::vector<gpu_block>> new_ids;  // the requests' spans point here
    new_ids.reserve(orders[o].size());
    for (size_t i : orders[o]) {
      test_request& r = reqs[i];
      r.append(12, static_cast<uint32_t>(o + 1));
      new_ids.push_back(r.alloc(computed[i] + 12, next_block_));
      cached.push_back(running(r, new_ids.back(), computed[i], 12));
      computed[i] += 12;
    }
    const auto m = step({}, cached);
    ASSERT_EQ(m.stores.size(), orders[o].size()) << "step " << o;
    for (size_t j = 0; j < m.stores.size(); ++j) {
      const test_request& r = reqs[orders[o][j]];
      EXPECT_EQ(m.stores[j].request_id, r.id) << "step " << o;
      EXPECT_EQ(m.stores[j].gpu_blocks, slice_ids(r.blocks, r.blocks.size() - 3, r.blocks.size()))
          << "step " << o << ", " << r.id;
      complete(m.stores[j]);
    }
  }
  // An unknown id in a known position is still an error, not a wrong guess taken.
  test_request ghost{"r9", prompt(12, 5)};
  const std::vector<scheduled_request> bad{running(reqs[1], {}, 48, 0), running(ghost, {}, 0, 12)};
  step_input in{step_++, {}, bad, {}};
  EXPECT_EQ(planner_->build_connector_meta(in).code(), errc::not_found);
}

TEST_F(PlannerTest, StoreJobCarriesTheGpuBlocksOfTheKeysActuallyStored) {
  // Keys 1 and 3 of the shared prefix are already offloaded: the new request's job stores
  // blocks 0, 2, 4, 5, with their GPU ids in that order (item 21 with a real manager).
  test_request a{"a", prompt(48, 1)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(48, next_block_);
  mgr_->store_only = std::vector<block_key>{a.keys()[1], a.keys()[3]};
  auto m = step({fresh(a, 0, 48)});
  mgr_->store_only.reset();
  ASSERT_EQ(m.stores.size(), 1u);
  complete(m.stores[0]);
  EXPECT_TRUE(planner_->request_finished("a"));

  test_request b{"b", prompt(72, 1)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{0u, false}));
  next_block_ = 100;
  b.alloc(72, next_block_);  // GPU 100..117
  m = step({fresh(b, 0, 72)});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks,
            (std::vector<gpu_block>{100, 101, 102, 106, 107, 108, 112, 113, 114, 115, 116, 117}));
  EXPECT_EQ(m.stores[0].slots.size(), 4u);
  // R1: the blocks need not be contiguous; the index is the first stored block's.
  EXPECT_EQ(m.stores[0].group_sizes, per_group{12});
  EXPECT_EQ(m.stores[0].block_indices, per_group{0});
}

TEST_F(PlannerTest, NullBlocksAreSkippedOrBecomeTheJobsSkip) {
  test_request a{"a", prompt(48, 1)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  // Block 0 all null (out of the sliding window), block 1 with one leading null, block 2
  // full, block 3 with a null in the middle (no job can express it: not stored).
  a.blocks = {0, 0, 0, 0, 5, 6, 7, 8, 9, 10, 0, 11};
  auto m = step({fresh(a, 0, 48)});
  EXPECT_EQ(mgr_->last("prepare_store"), slice(a.keys(), 1, 3));
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks, (std::vector<gpu_block>{5, 6, 7, 8, 9}));
  EXPECT_EQ(m.stores[0].skip, 1u);
  EXPECT_EQ(m.stores[0].block_indices, per_group{4});  // block 1's first non-null
  EXPECT_EQ(m.stores[0].group_sizes, per_group{5});
  EXPECT_EQ(m.stores[0].slots.size(), 2u);
  EXPECT_EQ(m.stores[0].gpu_blocks.size(), m.stores[0].slots.size() * 3 - m.stores[0].skip);
}

// --- loads (§9 item 23) -------------------------------------------------------------------

TEST_F(PlannerTest, LoadsFillTheBlocksAfterTheGpuCachedPrefix) {
  test_request w{"w", prompt(36, 1)};
  store_fully(w);
  test_request w2{"w2", prompt(24, 1000)};
  store_fully(w2);
  const auto keys = w.keys();
  ASSERT_TRUE(mgr_->hits(keys[2]));

  // A 12-token prompt, nothing on the GPU: loads block 0 into its 3 GPU blocks.
  test_request c{"c", prompt(12, 1)};
  mgr_->calls.clear();
  EXPECT_EQ(planner_->get_num_new_matched_tokens(c.view(), 0), (match_result{12u, true}));
  next_block_ = 20;
  c.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(c.view(), c.blocks, 12).ok());
  EXPECT_EQ(mgr_->last("prepare_load"), slice(keys, 0, 1));
  EXPECT_TRUE(planner_->load_in_flight("c"));

  // 24 GPU-cached + 12 new tokens: exactly one lookup, loads block 2 into GPU blocks 6..8.
  test_request d{"d", prompt(36, 1)};
  mgr_->calls.clear();
  EXPECT_EQ(planner_->get_num_new_matched_tokens(d.view(), 24), (match_result{12u, true}));
  EXPECT_EQ(mgr_->count("lookup"), 1u);
  next_block_ = 30;
  d.alloc(36, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(d.view(), d.blocks, 12).ok());

  // One GPU-cached block inside the first offloaded block: the load skips one sub-block.
  // (w2's prompt: block 0 of w is being loaded for c, which would delay e.)
  test_request e{"e", prompt(24, 1000)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(e.view(), 4), (match_result{20u, true}));
  next_block_ = 40;
  e.alloc(24, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(e.view(), e.blocks, 20).ok());
  // A second call with 0 external tokens does nothing.
  ASSERT_TRUE(planner_->update_state_after_alloc(e.view(), e.blocks, 0).ok());

  auto m = step({});
  ASSERT_EQ(m.loads.size(), 3u);
  EXPECT_TRUE(m.stores.empty());
  EXPECT_EQ(m.loads[0].request_id, "c");
  EXPECT_EQ(m.loads[0].kind, transfer_kind::load);
  EXPECT_EQ(m.loads[0].gpu_blocks, (std::vector<gpu_block>{20, 21, 22}));
  EXPECT_EQ(m.loads[0].slots.size(), 1u);
  EXPECT_EQ(m.loads[0].skip, 0u);
  EXPECT_EQ(m.loads[1].gpu_blocks, (std::vector<gpu_block>{36, 37, 38}));
  EXPECT_EQ(m.loads[1].skip, 0u);
  EXPECT_EQ(m.loads[2].gpu_blocks, (std::vector<gpu_block>{41, 42, 43, 44, 45}));
  EXPECT_EQ(m.loads[2].skip, 1u);
  EXPECT_EQ(m.loads[2].slots.size(), 2u);
  EXPECT_EQ(m.loads[1].block_indices, per_group{6});
  EXPECT_EQ(m.loads[1].group_sizes, per_group{3});
  EXPECT_EQ(m.loads[2].block_indices, per_group{1});
  EXPECT_EQ(m.loads[2].group_sizes, per_group{5});
  // Job ids come from one counter shared with the earlier store.
  EXPECT_LT(m.loads[0].id, m.loads[1].id);
  EXPECT_LT(m.loads[1].id, m.loads[2].id);
  EXPECT_EQ(planner_->stats().loads_planned, 3u);
  EXPECT_EQ(planner_->stats().load_blocks, 4u);

  // A loaded prefix is not stored again: c's cursor sits after block 0.
  for (const auto& j : m.loads) complete(j);
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_recving, (std::vector<std::string>{"c", "d", "e"}));
  EXPECT_TRUE(done.invalid_block_ids.empty());
  EXPECT_FALSE(planner_->load_in_flight("c"));
  mgr_->calls.clear();
  m = step({fresh(c, 11, 1)});  // full-prompt hit: the engine recomputes the last token
  EXPECT_EQ(mgr_->count("prepare_store"), 0u);
}

TEST_F(PlannerTest, LoadPlanningErrorsChangeNothing) {
  test_request w{"w", prompt(24, 1)};
  store_fully(w);
  test_request c{"c", prompt(24, 1)};
  mgr_->calls.clear();
  // Never looked up.
  auto s = planner_->update_state_after_alloc(c.view(), std::span<const gpu_block>{}, 24);
  EXPECT_EQ(s.code(), errc::not_found);
  EXPECT_EQ(planner_->get_num_new_matched_tokens(c.view(), 0), (match_result{24u, true}));
  // Too few GPU blocks for 24 tokens.
  c.alloc(12, next_block_);
  s = planner_->update_state_after_alloc(c.view(), c.blocks, 24);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  // Not a whole number of offloaded blocks.
  c.alloc(24, next_block_);
  EXPECT_EQ(planner_->update_state_after_alloc(c.view(), c.blocks, 20).code(), errc::invalid_argument);
  // More tokens than the request has keys for.
  EXPECT_EQ(planner_->update_state_after_alloc(c.view(), c.blocks, 36).code(), errc::invalid_argument);
  EXPECT_EQ(mgr_->count("prepare_load"), 0u);
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);

  ASSERT_TRUE(planner_->update_state_after_alloc(c.view(), c.blocks, 24).ok());
  EXPECT_EQ(planner_->update_state_after_alloc(c.view(), c.blocks, 24).code(),
            errc::precondition_failed);
  EXPECT_EQ(mgr_->count("prepare_load"), 1u);
  EXPECT_EQ(planner_->jobs_in_flight(), 1u);
}

TEST_F(PlannerTest, UnknownScheduledRequestIsAnErrorAndKeepsRecordedLoads) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request c{"c", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(c.view(), 0), (match_result{12u, true}));
  c.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(c.view(), c.blocks, 12).ok());

  test_request ghost{"ghost", prompt(12, 50)};
  const std::vector<gpu_block> none;
  std::vector<scheduled_request> cached{running(ghost, none, 0, 12)};
  auto bad = planner_->build_connector_meta(step_input{7, {}, cached, {}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), errc::not_found);
  EXPECT_NE(bad.error().message().find("ghost"), std::string::npos);
  EXPECT_FALSE(planner_->load_in_flight("ghost"));

  auto m = step({});
  ASSERT_EQ(m.loads.size(), 1u);  // the recorded load survived the failed call
  EXPECT_EQ(m.loads[0].request_id, "c");
}

// --- blocks being loaded (§9 item 26), abort during a load (item 27) -------------------------

TEST_F(PlannerTest, SecondRequestHittingBlocksInFlightIsAskedAgain) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request r2{"r2", prompt(12, 1)};
  test_request r3{"r3", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r2.view(), 0), (match_result{12u, true}));
  r2.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r2.view(), r2.blocks, 12).ok());
  auto m = step({});
  ASSERT_EQ(m.loads.size(), 1u);

  EXPECT_EQ(planner_->get_num_new_matched_tokens(r3.view(), 0), (match_result{std::nullopt, false}));
  EXPECT_EQ(planner_->stats().deferred, 1u);
  EXPECT_TRUE(step({}).loads.empty());

  complete(m.loads[0]);
  EXPECT_EQ(planner_->take_request_completions().finished_recving, std::vector<std::string>{"r2"});
  // r3 now finds the blocks in the GPU prefix cache (8 computed tokens): no lookup, no load.
  mgr_->calls.clear();
  EXPECT_EQ(planner_->get_num_new_matched_tokens(r3.view(), 8), (match_result{0u, false}));
  EXPECT_EQ(mgr_->count("lookup"), 0u);
  EXPECT_TRUE(step({}).loads.empty());
}

TEST_F(PlannerTest, WithoutPrefixCachingTwoRequestsMayLoadTheSameBlocks) {
  make(/*capacity=*/64, /*prefix_caching=*/false);
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request r2{"r2", prompt(12, 1)};
  test_request r3{"r3", prompt(12, 1)};
  for (auto* r : {&r2, &r3}) {
    ASSERT_EQ(planner_->get_num_new_matched_tokens(r->view(), 0), (match_result{12u, true}));
    r->alloc(12, next_block_);
    ASSERT_TRUE(planner_->update_state_after_alloc(r->view(), r->blocks, 12).ok());
  }
  auto m = step({});
  ASSERT_EQ(m.loads.size(), 2u);
  for (const auto& j : m.loads) complete(j);
  EXPECT_EQ(mgr_->count("complete_load"), 2u);
}

TEST_F(PlannerTest, AbortDuringLoadStillReportsFinishedRecving) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request r{"r", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
  r.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
  auto m = step({});
  ASSERT_EQ(m.loads.size(), 1u);

  EXPECT_FALSE(planner_->request_finished("r"));  // no stores in flight
  EXPECT_TRUE(planner_->load_in_flight("r"));     // the engine keeps the blocks until recving
  EXPECT_EQ(planner_->tracked_requests(), 1u);
  EXPECT_FALSE(planner_->request_finished("r"));  // a second call changes nothing

  mgr_->calls.clear();
  complete(m.loads[0]);
  EXPECT_EQ(mgr_->last("complete_load"), w.keys());
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_recving, std::vector<std::string>{"r"});
  EXPECT_TRUE(done.finished_sending.empty());
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
}

// --- preemption (§9 item 25) --------------------------------------------------------------

TEST_F(PlannerTest, PreemptionFlushesStoreJobsAndResumeLoadsThem) {
  test_request p{"p", prompt(24, 1)};
  (void)planner_->get_num_new_matched_tokens(p.view(), 0);
  p.alloc(24, next_block_);  // GPU 1..6
  auto m = step({fresh(p, 0, 24)});
  ASSERT_EQ(m.stores.size(), 1u);
  const job_id j1 = m.stores[0].id;
  std::vector<transfer_job> in_flight{m.stores[0]};

  // Decode 20 tokens one at a time; the step that computes token 36 stores GPU 7..9.
  for (int t = 0; t < 20; ++t) {
    p.append(1);
    const auto n = static_cast<uint32_t>(p.tokens.size());
    auto ids = p.alloc(n, next_block_);
    m = step({}, {running(p, ids, n - 1, 1)});
    for (const auto& j : m.stores) in_flight.push_back(j);
  }
  ASSERT_EQ(in_flight.size(), 2u);
  EXPECT_EQ(in_flight[1].gpu_blocks, (std::vector<gpu_block>{7, 8, 9}));

  // Preempted: both store jobs are flushed, nothing is completed early.
  mgr_->calls.clear();
  m = step({}, {}, {"p"});
  EXPECT_EQ(m.flush, (std::vector<job_id>{j1, in_flight[1].id}));
  EXPECT_EQ(m.flush_requests, std::vector<std::string>{"p"});
  EXPECT_EQ(mgr_->count("complete_store"), 0u);
  EXPECT_FALSE(mgr_->hits(p.keys()[0]));

  // The workers finished them before the step; their results arrive as usual.
  for (const auto& j : in_flight) complete(j);
  EXPECT_EQ(mgr_->count("complete_store"), 2u);

  // Resume: all 3 blocks hit and load into the new GPU blocks (44 tokens, 11 blocks).
  p.blocks.clear();
  EXPECT_EQ(planner_->get_num_new_matched_tokens(p.view(), 0), (match_result{36u, true}));
  next_block_ = 50;
  p.alloc(p.tokens.size(), next_block_);  // GPU 50..60
  ASSERT_TRUE(planner_->update_state_after_alloc(p.view(), p.blocks, 36).ok());
  m = step({});
  ASSERT_EQ(m.loads.size(), 1u);
  EXPECT_EQ(m.loads[0].gpu_blocks, (std::vector<gpu_block>{50, 51, 52, 53, 54, 55, 56, 57, 58}));
  complete(m.loads[0]);
  EXPECT_EQ(planner_->take_request_completions().finished_recving, std::vector<std::string>{"p"});

  // Scheduled again: the rest of the prompt, then 4 more tokens store block 3 (GPU 59..61).
  EXPECT_EQ(planner_->get_num_new_matched_tokens(p.view(), 36), (match_result{0u, false}));
  mgr_->calls.clear();
  m = step({fresh(p, 36, 8)});
  EXPECT_EQ(mgr_->count("prepare_store"), 0u);
  std::vector<transfer_job> stores;
  for (int t = 0; t < 4; ++t) {
    p.append(1);
    const auto n = static_cast<uint32_t>(p.tokens.size());
    auto ids = p.alloc(n, next_block_);
    m = step({}, {running(p, ids, n - 1, 1)});
    for (const auto& j : m.stores) stores.push_back(j);
  }
  ASSERT_EQ(stores.size(), 1u);
  EXPECT_EQ(stores[0].gpu_blocks, (std::vector<gpu_block>{59, 60, 61}));
  EXPECT_TRUE(planner_->request_finished("p"));  // EOS with the store in flight
  complete(stores[0]);
  EXPECT_EQ(planner_->take_request_completions().finished_sending, std::vector<std::string>{"p"});
}

TEST_F(PlannerTest, ResumedRequestReplacesItsBlockIds) {
  test_request p{"p", prompt(12, 1)};
  (void)planner_->get_num_new_matched_tokens(p.view(), 0);
  p.alloc(8, next_block_);  // 2 GPU blocks for the first 8 tokens (chunked prefill)
  auto m = step({fresh(p, 0, 8)});
  EXPECT_TRUE(m.stores.empty());
  m = step({}, {}, {"p"});
  EXPECT_TRUE(m.flush.empty());
  EXPECT_EQ(m.flush_requests, std::vector<std::string>{"p"});  // named without jobs (R1)
  // Resumed with fresh blocks 70..72: the old ids are dropped, not appended to.
  const std::vector<gpu_block> fresh_ids{70, 71, 72};
  m = step({}, {running(p, fresh_ids, 0, 12, /*resumed=*/true)});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks, fresh_ids);
}

// --- do_remote_decode (§9 item 28) --------------------------------------------------------

TEST_F(PlannerTest, RemoteDecodeStoresTheLoadedPrefixAgain) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  for (bool remote : {true, false}) {
    auto tokens = prompt(12, 1);  // block 0 is w's, block 1 is new
    for (uint32_t t : prompt(12, remote ? 200 : 300)) tokens.push_back(t);
    test_request r{remote ? "rd" : "local", tokens};
    r.remote_decode = remote;
    ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
    r.alloc(24, next_block_);
    ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
    auto m = step({});
    ASSERT_EQ(m.loads.size(), 1u);
    complete(m.loads[0]);
    EXPECT_EQ(planner_->get_num_new_matched_tokens(r.view(), 12), (match_result{0u, false}));
    mgr_->calls.clear();
    m = step({fresh(r, 12, 12)});
    const auto keys = r.keys();
    EXPECT_EQ(mgr_->last("prepare_store"), remote ? keys : slice(keys, 1, 2)) << r.id;
    if (remote) {
      ASSERT_EQ(m.stores.size(), 1u);
      // Block 0 is already offloaded; only block 1 (GPU blocks 4..6 of r) is moved.
      EXPECT_EQ(m.stores[0].gpu_blocks, slice_ids(r.blocks, 3, 6));
      for (const auto& j : m.stores) complete(j);
      (void)planner_->request_finished(r.id);
    }
  }
}

// --- per-job completion (§9 item 33) and failures ------------------------------------------

TEST_F(PlannerTest, EachJobCompletesOnceAndFinishedSendingWaitsForTheLast) {
  test_request a{"a", prompt(24, 1)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  auto m1 = step({fresh(a, 0, 12)});  // chunked prefill: block 0
  auto ids = a.alloc(24, next_block_);
  auto m2 = step({}, {running(a, ids, 12, 12)});  // block 1
  ASSERT_EQ(m1.stores.size(), 1u);
  ASSERT_EQ(m2.stores.size(), 1u);
  EXPECT_NE(m1.stores[0].id, m2.stores[0].id);

  mgr_->calls.clear();
  complete(m1.stores[0]);
  EXPECT_EQ(mgr_->calls.size(), 1u);
  EXPECT_EQ(mgr_->last("complete_store"), slice(a.keys(), 0, 1));
  EXPECT_TRUE(planner_->take_request_completions().empty());

  EXPECT_TRUE(planner_->request_finished("a"));  // block 1 still in flight
  mgr_->calls.clear();
  complete(m2.stores[0]);
  EXPECT_EQ(mgr_->calls.size(), 1u);
  EXPECT_EQ(mgr_->last("complete_store"), slice(a.keys(), 1, 2));
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_sending, std::vector<std::string>{"a"});
  EXPECT_TRUE(done.finished_recving.empty());
  EXPECT_EQ(planner_->tracked_requests(), 0u);

  // A request whose stores all finished: still delay_free (R1: it stored), no manager call at
  // finish, and finished_sending comes with the next output, job results or not.
  test_request b{"b", prompt(12, 500)};
  (void)planner_->get_num_new_matched_tokens(b.view(), 0);
  b.alloc(12, next_block_);
  auto m3 = step({fresh(b, 0, 12)});
  ASSERT_EQ(m3.stores.size(), 1u);
  complete(m3.stores[0]);
  mgr_->calls.clear();
  EXPECT_TRUE(planner_->request_finished("b"));
  EXPECT_TRUE(mgr_->calls.empty());
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_EQ(planner_->tracked_requests(), 1u);
  release_owed();
  EXPECT_TRUE(mgr_->calls.empty());
  EXPECT_EQ(planner_->take_request_completions().finished_sending, std::vector<std::string>{"b"});
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  EXPECT_EQ(planner_->stats().stores_ok, 3u);

  // A request that never stored is not delayed.
  test_request c{"c", prompt(8, 700)};
  (void)planner_->get_num_new_matched_tokens(c.view(), 0);
  c.alloc(8, next_block_);
  EXPECT_TRUE(step({fresh(c, 0, 8)}).stores.empty());
  EXPECT_FALSE(planner_->request_finished("c"));
  EXPECT_EQ(planner_->tracked_requests(), 0u);
}

// --- reset (vLLM main's reset_cache) --------------------------------------------------------

TEST_F(PlannerTest, ResetFlushesJobsInFlightAndKeepsTheirResultsFromTheManager) {
  make(/*capacity=*/4, /*prefix_caching=*/true);
  test_request w{"w", prompt(24, 1)};
  store_fully(w);  // slots 0, 1
  test_request a{"a", prompt(12, 300)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  auto m = step({fresh(a, 0, 12)});
  ASSERT_EQ(m.stores.size(), 1u);
  const transfer_job store = m.stores[0];  // slot 2, in flight at the reset
  test_request r{"r", prompt(24, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{24u, true}));
  next_block_ = 20;
  r.alloc(24, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 24).ok());

  // Mid-step (a load recorded for the next metadata): refused, nothing changed.
  const planner_tables before = planner_->tables();
  const auto refused = planner_->reset();
  EXPECT_EQ(refused.code(), errc::precondition_failed);
  EXPECT_NE(refused.message().find("between steps"), std::string::npos);
  EXPECT_EQ(planner_->tables(), before);
  EXPECT_EQ(planner_->manager().size(), 3u);

  m = step({}, {running(a, {}, 12, 0)});
  ASSERT_EQ(m.loads.size(), 1u);
  const transfer_job load = m.loads[0];  // reads slots 0, 1
  ASSERT_TRUE(planner_->reset().ok());
  EXPECT_EQ(mgr_->count("reset"), 1u);
  EXPECT_EQ(planner_->stats().resets, 1u);
  EXPECT_EQ(planner_->manager().size(), 0u);
  EXPECT_FALSE(mgr_->hits(w.keys()[0]));
  EXPECT_EQ(planner_->jobs_in_flight(), 2u);  // kept until their results: the requests need them
  EXPECT_TRUE(planner_->load_in_flight("r"));
  EXPECT_EQ(planner_->tables().reset_flush, 2u);

  // The next step flushes both jobs, stores the new request b in the freed slots 0 and 1 (the
  // load is still reading them: the workers finish it first), and a stores its block again
  // (its cursor went back to 0).
  test_request b{"b", prompt(24, 600)};
  (void)planner_->get_num_new_matched_tokens(b.view(), 0);
  b.alloc(24, next_block_);
  m = step({fresh(b, 0, 24)}, {running(a, {}, 12, 0)});
  EXPECT_EQ(m.flush, (std::vector<job_id>{store.id, load.id}));
  EXPECT_TRUE(m.failed.empty());  // stale, not failed: the workers end them with their outcome
  ASSERT_EQ(m.stores.size(), 2u);
  EXPECT_EQ(m.stores[0].request_id, "b");
  EXPECT_EQ(m.stores[0].slots, (std::vector<cpu_slot>{0, 1}));
  EXPECT_EQ(m.stores[1].request_id, "a");
  EXPECT_EQ(m.stores[1].slots, (std::vector<cpu_slot>{2}));
  EXPECT_GT(m.stores[0].id, load.id);
  EXPECT_EQ(planner_->tables().reset_flush, 0u);
  EXPECT_EQ(step({}).flush, std::vector<job_id>{});  // flushed once

  // The stale results arrive: the requests get their outcomes, the manager hears nothing (b's
  // and a's new blocks stay pending in those slots).
  mgr_->calls.clear();
  ASSERT_EQ(planner_->manager().busy(), 3u);
  complete(load);
  complete(store);
  EXPECT_TRUE(mgr_->calls.empty());
  EXPECT_EQ(planner_->manager().busy(), 3u);
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_recving, std::vector<std::string>{"r"});
  EXPECT_TRUE(done.invalid_block_ids.empty());
  EXPECT_FALSE(planner_->load_in_flight("r"));
  EXPECT_EQ(planner_->stats().stale_results, 2u);
  EXPECT_EQ(planner_->stats().loads_ok, 0u);
  EXPECT_EQ(planner_->stats().stores_ok, 1u);  // w's, before the reset
  EXPECT_EQ(planner_->stats().rejected_results, 0u);

  // The new jobs complete with the manager as usual; w's blocks miss, b's hit.
  for (const auto& j : m.stores) complete(j);
  EXPECT_EQ(planner_->manager().busy(), 0u);
  test_request w2{"w2", prompt(24, 1)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(w2.view(), 0), (match_result{0u, false}));
  test_request b2{"b2", prompt(24, 600)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(b2.view(), 0), (match_result{24u, true}));
}

// A stale job that fails before the reset's flush went out is flushed once and named failed
// there; one that fails after it was flushed already and is named nowhere.
TEST_F(PlannerTest, AStaleJobIsNamedFailedOnlyWhenItFailedBeforeTheResetsFlush) {
  std::vector<transfer_job> loads;
  for (const uint32_t first : {1u, 100u}) {
    test_request w{"w" + std::to_string(first), prompt(12, first)};
    store_fully(w);
    test_request r{"r" + std::to_string(first), prompt(16, first)};
    ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
    r.alloc(16, next_block_);
    ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
    const auto m = step({});
    ASSERT_EQ(m.loads.size(), 1u);
    loads.push_back(m.loads[0]);
  }
  ASSERT_TRUE(planner_->reset().ok());
  complete(loads[0], /*ok=*/false);
  const auto m = step({});
  EXPECT_EQ(m.flush, (std::vector<job_id>{loads[0].id, loads[1].id}));  // each once
  EXPECT_EQ(m.failed, std::vector<job_id>{loads[0].id});
  complete(loads[1], /*ok=*/false);
  const auto m2 = step({});
  EXPECT_TRUE(m2.flush.empty());
  EXPECT_TRUE(m2.failed.empty());
}

TEST_F(PlannerTest, StaleJobsStillReleaseTheirRequests) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  // a finishes with its store in flight (delay_free); r waits for a load that will fail.
  test_request a{"a", prompt(12, 300)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  auto m = step({fresh(a, 0, 12)});
  ASSERT_EQ(m.stores.size(), 1u);
  const transfer_job store = m.stores[0];
  EXPECT_TRUE(planner_->request_finished("a"));
  test_request r{"r", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
  next_block_ = 30;
  r.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
  m = step({});
  ASSERT_EQ(m.loads.size(), 1u);
  const transfer_job load = m.loads[0];

  ASSERT_TRUE(planner_->reset().ok());
  complete(store);
  complete(load, /*ok=*/false);
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_sending, std::vector<std::string>{"a"});
  EXPECT_EQ(done.finished_recving, std::vector<std::string>{"r"});
  EXPECT_EQ(done.invalid_block_ids, (std::vector<gpu_block>{30, 31, 32}));  // r's own blocks
  EXPECT_FALSE(planner_->request_finished("r"));
  (void)step({});  // delivers the flush
  EXPECT_EQ(planner_->tables(), planner_tables{});
  EXPECT_EQ(planner_->manager().busy(), 0u);

  // A second reset with nothing in flight flushes nothing.
  ASSERT_TRUE(planner_->reset().ok());
  EXPECT_EQ(planner_->tables(), planner_tables{});
  EXPECT_EQ(step({}).flush, std::vector<job_id>{});
  EXPECT_EQ(planner_->stats().resets, 2u);
}

TEST_F(PlannerTest, VllmsSetsCompleteStaleJobsWithoutTheManager) {
  // A replay of vLLM's calls (completes_jobs): finished_sending / finished_recving complete the
  // requests' stale jobs, and only their request-level outcome remains.
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request a{"a", prompt(12, 300)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  auto m = step({fresh(a, 0, 12)});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_TRUE(planner_->request_finished("a"));
  test_request r{"r", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{12u, true}));
  r.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 12).ok());
  ASSERT_EQ(step({}).loads.size(), 1u);
  ASSERT_TRUE(planner_->reset().ok());
  mgr_->calls.clear();
  const std::vector<std::string_view> sending{"a"}, recving{"r"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{sending, recving}).ok());
  EXPECT_TRUE(mgr_->calls.empty());
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
  EXPECT_EQ(planner_->tracked_requests(), 1u);  // r, running now
  EXPECT_EQ(planner_->stats().stale_results, 2u);
}

TEST_F(PlannerTest, StoredAndRemovedEventsComeFromTheManager) {
  make(/*capacity=*/2, /*prefix_caching=*/true);
  test_request a{"a", prompt(24, 1)};
  store_fully(a);
  auto ev = planner_->take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, kv_event_kind::stored);
  EXPECT_EQ(ev[0].where, medium::cpu);
  EXPECT_EQ(ev[0].keys, a.keys());
  EXPECT_TRUE(planner_->take_events().empty());

  test_request b{"b", prompt(12, 300)};
  store_fully(b);  // evicts one of a's blocks
  ev = planner_->take_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, kv_event_kind::removed);
  EXPECT_EQ(ev[0].keys.size(), 1u);
  EXPECT_EQ(ev[1].kind, kv_event_kind::stored);
  EXPECT_EQ(ev[1].keys, b.keys());
}

TEST_F(PlannerTest, FailedStoreFreesSlotsWithoutEventAndDoesNotHit) {
  test_request a{"a", prompt(24, 1)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(24, next_block_);
  auto m = step({fresh(a, 0, 24)});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(planner_->manager().size(), 2u);
  EXPECT_TRUE(planner_->request_finished("a"));

  mgr_->calls.clear();
  complete(m.stores[0], /*ok=*/false);
  EXPECT_EQ(mgr_->last("complete_store_failed"), a.keys());
  EXPECT_EQ(mgr_->count("complete_store"), 0u);
  EXPECT_EQ(planner_->manager().size(), 0u);
  EXPECT_TRUE(planner_->take_events().empty());
  EXPECT_EQ(planner_->stats().stores_failed, 1u);
  // The blocks are freed once the job is over, failed or not.
  EXPECT_EQ(planner_->take_request_completions().finished_sending, std::vector<std::string>{"a"});

  test_request b{"b", prompt(24, 1)};
  EXPECT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{0u, false}));
  // Its slots are free for the next step's jobs while another rank may still write them: the
  // next metadata flushes it, once.
  EXPECT_EQ(step({}).flush, std::vector<job_id>{m.stores[0].id});
  EXPECT_TRUE(step({}).flush.empty());
}

TEST_F(PlannerTest, FailedLoadUnpinsAndReportsInvalidBlocks) {
  make(/*capacity=*/2, /*prefix_caching=*/true);
  test_request w{"w", prompt(24, 1)};
  store_fully(w);
  test_request r{"r", prompt(24, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(r.view(), 0), (match_result{24u, true}));
  next_block_ = 10;
  r.alloc(24, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(r.view(), r.blocks, 24).ok());
  auto m = step({});
  ASSERT_EQ(m.loads.size(), 1u);

  // While pinned, the pool (2 slots, both read) has no room for another block.
  test_request x{"x", prompt(12, 900)};
  (void)planner_->get_num_new_matched_tokens(x.view(), 0);
  x.alloc(12, next_block_);
  EXPECT_TRUE(step({fresh(x, 0, 12)}).stores.empty());
  EXPECT_EQ(planner_->stats().store_retries, 1u);

  complete(m.loads[0], /*ok=*/false);
  EXPECT_EQ(mgr_->last("complete_load"), w.keys());
  auto done = planner_->take_request_completions();
  EXPECT_EQ(done.finished_recving, std::vector<std::string>{"r"});
  EXPECT_EQ(done.invalid_block_ids, (std::vector<gpu_block>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(planner_->stats().loads_failed, 1u);
  EXPECT_FALSE(planner_->load_in_flight("r"));

  // Unpinned: x's retried store can now evict one of them; the failed load is flushed by that
  // metadata (another rank may still be reading its slots, or writing r's GPU blocks that r
  // recomputes), once.
  auto m2 = step({}, {running(x, {}, 12, 0)});
  EXPECT_EQ(m2.stores.size(), 1u);
  EXPECT_EQ(m2.flush, std::vector<job_id>{m.loads[0].id});
  EXPECT_EQ(m2.failed, std::vector<job_id>{m.loads[0].id});
  EXPECT_TRUE(m2.flush_requests.empty());
  EXPECT_TRUE(step({}).flush.empty());
}

TEST_F(PlannerTest, UnknownDuplicateOrMismatchedResultsAreRejected) {
  test_request a{"a", prompt(12, 1)};
  test_request b{"b", prompt(12, 100)};
  for (auto* r : {&a, &b}) {
    (void)planner_->get_num_new_matched_tokens(r->view(), 0);
    r->alloc(12, next_block_);
  }
  auto m = step({fresh(a, 0, 12), fresh(b, 0, 12)});
  ASSERT_EQ(m.stores.size(), 2u);
  const auto ja = m.stores[0];
  const auto jb = m.stores[1];

  // Wrong kind: rejected, the job stays in flight.
  mgr_->calls.clear();
  auto s = planner_->update_connector_output({1, {job_result{ja.id, transfer_kind::load, true}}});
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_TRUE(mgr_->calls.empty());
  EXPECT_EQ(planner_->jobs_in_flight(), 2u);

  // A batch with a valid result and an unknown id: the valid one is applied.
  s = planner_->update_connector_output({2,
                                      {job_result{ja.id, transfer_kind::store, true},
                                       job_result{999, transfer_kind::store, true}}});
  EXPECT_EQ(s.code(), errc::not_found);
  EXPECT_NE(s.message().find("999"), std::string::npos);
  EXPECT_EQ(mgr_->count("complete_store"), 1u);

  // The same job again: rejected, no second completion.
  s = planner_->update_connector_output({3, {job_result{ja.id, transfer_kind::store, true}}});
  EXPECT_EQ(s.code(), errc::not_found);
  EXPECT_EQ(mgr_->count("complete_store"), 1u);

  // Two results for b in one batch: the first completes it, the second is rejected.
  s = planner_->update_connector_output({4,
                                      {job_result{jb.id, transfer_kind::store, true},
                                       job_result{jb.id, transfer_kind::store, false}}});
  EXPECT_EQ(s.code(), errc::not_found);
  EXPECT_EQ(mgr_->count("complete_store"), 2u);
  EXPECT_EQ(mgr_->count("complete_store_failed"), 0u);
  EXPECT_EQ(planner_->stats().rejected_results, 4u);
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
}

// --- inputs as vLLM gives them: hashed flags, request-level outcomes
// ------------------------------

TEST_F(PlannerTest, LoadStartsAtTheFirstBlockWithoutAHash) {
  test_request w{"w", prompt(36, 1)};
  store_fully(w);
  // 12 tokens computed locally, but the GPU prefix cache also holds block 3 (past num_computed):
  // R1 starts the load at the first unhashed block, 4, skipping one sub-block of key 1.
  test_request d{"d", prompt(36, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(d.view(), 12), (match_result{24u, true}));
  next_block_ = 10;
  d.alloc(36, next_block_);  // GPU 10..18
  const std::vector<uint8_t> hashed{1, 1, 1, 1, 0, 0, 0, 0, 0};
  const std::vector<uint8_t> too_few{1, 1, 1};
  EXPECT_EQ(planner_->update_state_after_alloc(d.view(), {d.blocks, too_few}, 24).code(),
            errc::invalid_argument);
  ASSERT_TRUE(planner_->update_state_after_alloc(d.view(), {d.blocks, hashed}, 24).ok());
  ASSERT_EQ(planner_->pending_loads().size(), 1u);
  const transfer_job job = planner_->pending_loads()[0];
  EXPECT_EQ(job.gpu_blocks, (std::vector<gpu_block>{14, 15, 16, 17, 18}));
  EXPECT_EQ(job.block_indices, per_group{4});
  EXPECT_EQ(job.group_sizes, per_group{5});
  EXPECT_EQ(job.skip, 1u);
  EXPECT_EQ(job.slots.size(), 2u);
  EXPECT_EQ(std::vector<block_key>(planner_->job_keys(job.id).begin(), planner_->job_keys(job.id).end()),
            slice(w.keys(), 1, 3));
  auto m = step({});
  ASSERT_EQ(m.loads.size(), 1u);
  complete(m.loads[0]);

  // Every block up to the hit already hashed: an empty load job (R1 records one), which still
  // ends the request's wait through finished_recving.
  test_request e{"e", prompt(24, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(e.view(), 0), (match_result{24u, true}));
  e.alloc(24, next_block_);
  const std::vector<uint8_t> all(e.blocks.size(), 1);
  ASSERT_TRUE(planner_->update_state_after_alloc(e.view(), {e.blocks, all}, 24).ok());
  m = step({});
  ASSERT_EQ(m.loads.size(), 1u);
  EXPECT_TRUE(m.loads[0].slots.empty());
  EXPECT_TRUE(m.loads[0].gpu_blocks.empty());
  EXPECT_TRUE(m.loads[0].group_sizes.empty());
  EXPECT_TRUE(m.loads[0].block_indices.empty());
  const std::vector<std::string_view> recving{"e"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving}).ok());
  EXPECT_FALSE(planner_->load_in_flight("e"));
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
}

TEST_F(PlannerTest, RequestLevelOutputsCompleteTheRequestsJobs) {
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  // a: two store jobs (chunked prefill); b: a load of w's block; c: deferred behind b.
  test_request a{"a", prompt(24, 500)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  auto m1 = step({fresh(a, 0, 12)});
  auto ids = a.alloc(24, next_block_);
  auto m2 = step({}, {running(a, ids, 12, 12)});
  ASSERT_EQ(m1.stores.size() + m2.stores.size(), 2u);
  test_request b{"b", prompt(12, 1)};
  test_request c{"c", prompt(12, 1)};
  ASSERT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{12u, true}));
  b.alloc(12, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(b.view(), b.blocks, 12).ok());
  ASSERT_EQ(step({}).loads.size(), 1u);
  EXPECT_EQ(planner_->get_num_new_matched_tokens(c.view(), 0), (match_result{std::nullopt, false}));

  // A preemption naming a request without jobs and one the planner never saw: both are
  // flushed by name (R1's reqs_to_flush), without job ids.
  auto m3 = step({}, {}, {"c", "ghost"});
  EXPECT_EQ(m3.flush_requests, (std::vector<std::string>{"c", "ghost"}));
  EXPECT_TRUE(m3.flush.empty());

  // finished_sending completes every store job of a (one stored event per job); finished_recving
  // b's load; ids with nothing to complete are ignored. The sets reach the engine as given.
  (void)planner_->take_events();
  mgr_->calls.clear();
  const std::vector<std::string_view> sending{"a", "nobody"};
  const std::vector<std::string_view> recving{"b", "c"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{sending, recving}).ok());
  EXPECT_EQ(mgr_->ops(),
            (std::vector<std::string>{"complete_store", "complete_store", "complete_load"}));
  EXPECT_EQ(planner_->take_request_completions(),
            (request_completions{{"a", "nobody"}, {"b", "c"}, {}}));
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
  const auto ev = planner_->take_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].keys, slice(a.keys(), 0, 1));
  EXPECT_EQ(ev[1].keys, slice(a.keys(), 1, 2));
  // c is no longer held back; a's finished_sending dropped its store entry (R1 pops it).
  EXPECT_EQ(planner_->get_num_new_matched_tokens(c.view(), 0), (match_result{12u, true}));
  EXPECT_FALSE(planner_->request_finished("a"));
}

// With kvconnect's workers the coordinator's job results decide every store's outcome; vLLM's
// sets release requests to the engine, each once, whichever form names it first, and settle the
// load of a request their finished_recving names (every worker reported it).
TEST_F(PlannerTest, WithWorkersVllmsSetsReleaseRequestsAndTheJobResultsDecide) {
  const auto live = request_output_role::releases_requests;
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  // a: one store job in flight, finished (delay_free); b: a load of w's block in flight.
  test_request a{"a", prompt(12, 500)};
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  a.alloc(12, next_block_);
  const auto store = step({fresh(a, 0, 12)}).stores;
  ASSERT_EQ(store.size(), 1u);
  EXPECT_TRUE(planner_->request_finished("a"));
  test_request b{"b", prompt(16, 1)};
  record_load_of_12(b);
  const auto load = step({}).loads;
  ASSERT_EQ(load.size(), 1u);

  mgr_->calls.clear();
  const std::vector<std::string_view> sending{"a", "w", "nobody"};
  const std::vector<std::string_view> recving{"b", "nobody"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{sending, recving, live}).ok());
  // The store stays the coordinator's; b's load is settled ok (no invalid block): unpinned now.
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"complete_load"}));
  EXPECT_EQ(planner_->jobs_in_flight(), 1u);
  EXPECT_FALSE(planner_->load_in_flight("b"));
  EXPECT_TRUE(planner_->settled(load[0].id));
  EXPECT_EQ(planner_->stats().loads_ok, 1u);
  EXPECT_EQ(planner_->stats().loads_settled, 1u);
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{"a"}, {"b"}, {}}));
  // Named again (a duplicate): nothing more reaches the engine.
  ASSERT_TRUE(planner_->update_connector_output(request_output{sending, recving, live}).ok());
  EXPECT_TRUE(planner_->take_request_completions().empty());

  // The coordinator fails both (b's at its deadline, a report lost): a's blocks are dropped;
  // b's settled load is untouched (no invalid block, no second outcome); neither request is
  // reported a second time, and a is released with its last job.
  (void)planner_->take_events();
  mgr_->calls.clear();
  complete(store[0], /*ok=*/false);
  EXPECT_TRUE(planner_->settled_results_dropped().empty());
  complete(load[0], /*ok=*/false);
  const std::vector<settled_result> dropped{{load[0].id, true}};  // as the sets settled it
  EXPECT_TRUE(std::ranges::equal(planner_->settled_results_dropped(), dropped));
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"complete_store_failed"}));
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_TRUE(planner_->take_events().empty());  // no stored event
  EXPECT_EQ(planner_->stats().stores_failed, 1u);
  EXPECT_EQ(planner_->stats().loads_failed, 0u);
  EXPECT_EQ(planner_->stats().settled_results, 1u);
  EXPECT_EQ(planner_->stats().rejected_results, 0u);
  EXPECT_FALSE(planner_->settled(load[0].id));
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
  EXPECT_EQ(planner_->tracked_requests(), 1u);  // b, running
  EXPECT_FALSE(planner_->request_finished("b"));
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  test_request again{"again", prompt(12, 500)};  // a's tokens
  EXPECT_EQ(planner_->get_num_new_matched_tokens(again.view(), 0), (match_result{0u, false}));
  EXPECT_FALSE(planner_->request_finished("again"));

  // Job results first: the request is reported with them, and vLLM's later set is dropped.
  test_request c{"c", prompt(12, 900)};
  (void)planner_->get_num_new_matched_tokens(c.view(), 0);
  c.alloc(12, next_block_);
  const auto stores_c = step({fresh(c, 0, 12)}).stores;
  ASSERT_EQ(stores_c.size(), 1u);
  EXPECT_TRUE(planner_->request_finished("c"));
  complete(stores_c[0]);
  EXPECT_EQ(planner_->take_request_completions().finished_sending, (std::vector<std::string>{"c"}));
  const std::vector<std::string_view> late{"c"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{late, {}, live}).ok());
  EXPECT_TRUE(planner_->take_request_completions().empty());
  (void)step({});  // the finished ids go to the workers
  EXPECT_EQ(planner_->tables(), planner_tables{});
}

// vLLM names a loading request in finished_recving once every worker reported it, and the
// workers' failed copies come as invalid_block_ids in that output or an earlier one: a load with
// one of its blocks among them is settled as failed (vLLM recomputes those blocks; kvconnect
// does not name them again), and the coordinator's later success changes nothing.
TEST_F(PlannerTest, WithWorkersALoadWhoseBlocksTheEngineNamedInvalidIsSettledAsFailed) {
  const auto live = request_output_role::releases_requests;
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request b{"b", prompt(16, 1)};
  record_load_of_12(b);
  const auto load = step({}).loads;
  ASSERT_EQ(load.size(), 1u);

  // Rank 0's failed copy of b's second block, in an output before the last rank named b (and
  // blocks of nobody's load).
  const std::vector<gpu_block> invalid{b.blocks[1], 999};
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, {}, live, invalid}).ok());
  EXPECT_TRUE(planner_->load_in_flight("b"));
  EXPECT_TRUE(planner_->take_request_completions().empty());
  mgr_->calls.clear();
  const std::vector<std::string_view> recving{"b"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live}).ok());
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"complete_load"}));
  EXPECT_EQ(planner_->stats().loads_failed, 1u);
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{}, {"b"}, {}}));
  // The failed job is flushed with the next metadata (as every failed job).
  complete(load[0], /*ok=*/true);
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_EQ(planner_->stats().loads_ok, 0u);
  EXPECT_FALSE(planner_->request_finished("b"));
  EXPECT_EQ(step({}).flush, (std::vector<job_id>{load[0].id}));
  EXPECT_EQ(planner_->tables(), planner_tables{});
}

// The invalid blocks of the same output settle the load as failed too; a load recorded but not
// yet sent is not settled by a set that names its request.
TEST_F(PlannerTest, WithWorkersTheSameOutputsInvalidBlocksFailTheLoadAndAnUnsentLoadWaits) {
  const auto live = request_output_role::releases_requests;
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request b{"b", prompt(16, 1)};
  record_load_of_12(b);
  const std::vector<std::string_view> recving{"b"};
  const std::vector<gpu_block> invalid{b.blocks[2]};
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live, invalid}).ok());
  EXPECT_TRUE(planner_->load_in_flight("b"));  // recorded for the next metadata: not settled
  EXPECT_TRUE(planner_->take_request_completions().empty());
  const auto load = step({}).loads;
  ASSERT_EQ(load.size(), 1u);
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live, invalid}).ok());
  EXPECT_FALSE(planner_->load_in_flight("b"));
  EXPECT_EQ(planner_->stats().loads_failed, 1u);
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{}, {"b"}, {}}));
  complete(load[0], /*ok=*/false);  // the coordinator's failure: dropped, nothing reported
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_EQ(planner_->stats().settled_results, 1u);
  EXPECT_FALSE(planner_->request_finished("b"));
  (void)step({});
  EXPECT_EQ(planner_->tables(), planner_tables{});
}

// Preempted after its load was settled (vLLM ran it on its finished_recving), a request loads
// again while the coordinator has not decided the first load (a report lost): the second load is
// planned as any other.
TEST_F(PlannerTest, WithWorkersARequestPreemptedAfterASettledLoadLoadsAgain) {
  const auto live = request_output_role::releases_requests;
  test_request w{"w", prompt(12, 1)};
  store_fully(w);
  test_request b{"b", prompt(16, 1)};
  record_load_of_12(b);
  const auto first = step({}).loads;
  ASSERT_EQ(first.size(), 1u);
  const std::vector<std::string_view> recving{"b"};
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live}).ok());
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{}, {"b"}, {}}));
  // b runs one step, then is preempted; its blocks are freed and it is scheduled again.
  EXPECT_TRUE(step({}, {running(b, {}, 12, 1)}).stores.empty());
  const std::vector<std::string_view> preempted{"b"};
  EXPECT_TRUE(step({}, {}, preempted).flush.empty());  // nothing of b's in flight
  ASSERT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{12u, true}));
  b.blocks.clear();
  b.alloc(16, next_block_);
  ASSERT_TRUE(planner_->update_state_after_alloc(b.view(), b.blocks, 12).ok());
  const auto second = step({}).loads;
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].gpu_blocks, slice_ids(b.blocks, 0, 3));
  complete(first[0], /*ok=*/false);  // the first load's deadline: dropped
  complete(second[0]);
  // The coordinator came first: b is released by vLLM's set, which names it once every worker
  // reported it.
  EXPECT_TRUE(planner_->take_request_completions().empty());
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live}).ok());
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{}, {"b"}, {}}));
  EXPECT_EQ(planner_->stats().loads_ok, 2u);
  EXPECT_EQ(planner_->stats().settled_results, 1u);
  EXPECT_FALSE(planner_->request_finished("b"));
  (void)step({});
  EXPECT_EQ(planner_->tables(), planner_tables{});
}

// vLLM reads a connector's invalid blocks before update_connector_output: a load the
// coordinator fails before vLLM's set named its request (a rank's copy past its deadline) is
// completed and flushed, but neither the request nor its blocks are reported by the planner; the
// workers name both (the flush withdraws the load) and vLLM's set, when it names the request,
// releases it, once, even after the request was aborted. An engine that reads the planner's
// completions alone (no releases_requests output ever) gets them from the coordinator's result.
TEST_F(PlannerTest, WithWorkersALoadFailedBeforeTheEngineNamedItAwaitsTheEnginesSet) {
  const auto live = request_output_role::releases_requests;
  test_request w{"w", prompt(12, 1)};
  store_fully(w);

  // Without the engine's sets the coordinator's failure reports the request and its blocks.
  test_request a{"a", prompt(16, 1)};
  const auto load_a = send_load_of_12(a);
  complete(load_a, /*ok=*/false);
  EXPECT_EQ(planner_->take_request_completions(),
            (request_completions{{}, {"a"}, slice_ids(a.blocks, 0, 3)}));
  EXPECT_FALSE(planner_->request_finished("a"));
  EXPECT_EQ(step({}).flush, (std::vector<job_id>{load_a.id}));

  // From the first output of vLLM's sets on, the engine names loading requests.
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, {}, live}).ok());
  test_request b{"b", prompt(16, 1)};
  const auto load_b = send_load_of_12(b);
  mgr_->calls.clear();
  complete(load_b, /*ok=*/false);  // rank 1's copy missed its deadline
  EXPECT_EQ(mgr_->ops(), (std::vector<std::string>{"complete_load"}));
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_FALSE(planner_->load_in_flight("b"));
  EXPECT_EQ(planner_->stats().loads_failed, 2u);
  EXPECT_EQ(planner_->tables().awaiting_engine, 1u);
  const auto withdrawing = step({});
  EXPECT_EQ(withdrawing.flush, (std::vector<job_id>{load_b.id}));
  EXPECT_EQ(withdrawing.failed, (std::vector<job_id>{load_b.id}));  // the workers withdraw it
  // b is aborted while vLLM still waits for its load: its state goes, the wait does not.
  EXPECT_FALSE(planner_->request_finished("b"));
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  // vLLM names b with the blocks its workers reported (its own invalid_block_ids): released
  // now, once, with no blocks of the planner's.
  const std::vector<std::string_view> recving{"b"};
  const auto invalid = slice_ids(b.blocks, 0, 3);
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live, invalid}).ok());
  EXPECT_EQ(planner_->take_request_completions(), (request_completions{{}, {"b"}, {}}));
  ASSERT_TRUE(planner_->update_connector_output(request_output{{}, recving, live}).ok());
  EXPECT_TRUE(planner_->take_request_completions().empty());
  EXPECT_EQ(planner_->stats().loads_settled, 0u);
  (void)step({});
  EXPECT_EQ(planner_->tables(), planner_tables{});
}

// --- vLLM R1 reproductions (tests/scheduler/connector_traces/repro-*.jsonl)
// -----------------------

/// The reproductions' geometry: GPU block = offloaded block = hash block = 4 tokens, a 2-slot
/// LRU pool with events. Block hashes are the trace's integers.
class ConnectorR1ReproTest : public ::testing::Test {
 protected:
  struct trace_request {
    std::string id;
    std::vector<block_key> hashes;
    uint32_t num_tokens = 0;
    request_view view() const { return {id, hashes, num_tokens}; }
  };

  void SetUp() override {
    planner_config cfg;
    cfg.gpu_block_size = 4;
    cfg.offloaded_block_size = 4;
    cfg.hash_block_size = 4;
    cfg.manager.capacity = 2;
    auto cs = planner::create(cfg);
    ASSERT_TRUE(cs.ok()) << cs.error().to_string();
    planner_ = std::move(*cs);
  }

  static std::vector<block_key> keys(std::initializer_list<uint64_t> ints) {
    std::vector<block_key> out;
    for (uint64_t i : ints) out.push_back(block_key::from_index(i));
    return out;
  }
  static trace_request request(std::string id, std::initializer_list<uint64_t> hashes) {
    return {std::move(id), keys(hashes), static_cast<uint32_t>(4 * hashes.size())};
  }

  connector_metadata step(std::vector<scheduled_request> fresh,
                          std::vector<scheduled_request> cached,
                          std::vector<std::string_view> preempted = {}) {
    auto m = planner_->build_connector_meta({step_++, fresh, cached, preempted});
    EXPECT_TRUE(m.ok()) << m.error().to_string();
    return m.ok() ? std::move(*m) : connector_metadata{};
  }
  /// The trace's worker: a preempted request's flushed store jobs complete right after the step.
  void complete_flushed(const connector_metadata& m) {
    connector_output out{m.step, {}};
    for (job_id id : m.flush) out.jobs.push_back({id, transfer_kind::store, true});
    auto s = planner_->update_connector_output(out);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  void finished_sending(std::vector<std::string_view> ids) {
    auto s = planner_->update_connector_output(request_output{ids, {}});
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  /// take_events as (kind, keys) pairs.
  std::vector<std::pair<kv_event_kind, std::vector<block_key>>> events() {
    std::vector<std::pair<kv_event_kind, std::vector<block_key>>> out;
    for (auto& e : planner_->take_events()) out.emplace_back(e.kind, std::move(e.keys));
    return out;
  }
  using ev = std::pair<kv_event_kind, std::vector<block_key>>;

  std::unique_ptr<planner> planner_;
  step_id step_ = 0;
};

// repro-store-cursor-after-preemption: rA's blocks are stored, flushed by a preemption, then
// evicted by rB; rA resumes with chunked prefill (4 of 8 tokens), which moves its store cursor
// back to 1, so the next step offers block 1 again and stores it (evicting 202). Before the fix
// the cursor stayed at 2 and block 1 was never stored again.
TEST_F(ConnectorR1ReproTest, StoreCursorMovesBackAfterPreemption) {
  const auto a = request("rA", {101, 102});
  EXPECT_EQ(planner_->get_num_new_matched_tokens(a.view(), 0), (match_result{0u, false}));
  const std::vector<gpu_block> a_blocks{1, 2};
  auto m = step({{a.view(), a_blocks, 0, 8}}, {});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].slots, (std::vector<cpu_slot>{0, 1}));

  m = step({}, {}, {"rA"});
  EXPECT_EQ(m.flush_requests, std::vector<std::string>{"rA"});
  complete_flushed(m);
  EXPECT_EQ(events(), (std::vector<ev>{{kv_event_kind::stored, keys({101, 102})}}));

  const auto b = request("rB", {201, 202});
  EXPECT_EQ(planner_->get_num_new_matched_tokens(b.view(), 0), (match_result{0u, false}));
  const std::vector<gpu_block> b_blocks{3, 4};
  m = step({{b.view(), b_blocks, 0, 8}}, {});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].slots, (std::vector<cpu_slot>{0, 1}));
  EXPECT_TRUE(planner_->request_finished("rB"));
  finished_sending({"rB"});
  EXPECT_EQ(events(), (std::vector<ev>{{kv_event_kind::removed, keys({102, 101})},
                                       {kv_event_kind::stored, keys({201, 202})}}));

  // Resumed: blocks 5, 6; 4 tokens recomputed this step, 4 the next.
  EXPECT_EQ(planner_->get_num_new_matched_tokens(a.view(), 0), (match_result{0u, false}));
  const std::vector<gpu_block> a_new{5, 6};
  m = step({}, {{a.view(), a_new, 0, 4, /*resumed=*/true}});
  EXPECT_TRUE(m.stores.empty());
  EXPECT_TRUE(events().empty());
  m = step({}, {{a.view(), {}, 4, 4}});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].request_id, "rA");
  EXPECT_EQ(m.stores[0].slots, std::vector<cpu_slot>{1});
  EXPECT_EQ(m.stores[0].gpu_blocks, std::vector<gpu_block>{6});
  EXPECT_EQ(m.stores[0].group_sizes, per_group{1});
  EXPECT_EQ(m.stores[0].block_indices, per_group{1});
  EXPECT_EQ(std::vector<block_key>(planner_->job_keys(m.stores[0].id).begin(),
                                   planner_->job_keys(m.stores[0].id).end()),
            keys({102}));
  EXPECT_EQ(events(), (std::vector<ev>{{kv_event_kind::removed, keys({202})}}));
}

// repro-delay-free-after-flush: rA stored, was preempted (the flush completed its store and left
// nothing in flight) and is aborted while waiting: R1 still answers delay_free = true, and a
// finished_sending for it follows.
TEST_F(ConnectorR1ReproTest, DelayFreeAfterPreemptionFlush) {
  const auto a = request("rA", {101, 102});
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  const std::vector<gpu_block> a_blocks{1, 2};
  ASSERT_EQ(step({{a.view(), a_blocks, 0, 8}}, {}).stores.size(), 1u);
  auto m = step({}, {}, {"rA"});
  complete_flushed(m);
  EXPECT_EQ(events(), (std::vector<ev>{{kv_event_kind::stored, keys({101, 102})}}));
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);

  EXPECT_TRUE(planner_->request_finished("rA"));
  EXPECT_EQ(planner_->tracked_requests(), 1u);  // held for finished_sending
  finished_sending({"rA"});                  // the engine's worker reports it (vLLM)
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  EXPECT_EQ(planner_->take_request_completions().finished_sending,
            (std::vector<std::string>{"rA"}));  // the engine's word, as given
  EXPECT_TRUE(events().empty());

  // With job results instead (kvconnect's workers), the planner reports it itself.
  const auto c = request("rC", {301});
  (void)planner_->get_num_new_matched_tokens(c.view(), 0);
  const std::vector<gpu_block> c_blocks{7};
  ASSERT_EQ(step({{c.view(), c_blocks, 0, 4}}, {}).stores.size(), 1u);
  complete_flushed(step({}, {}, {"rC"}));
  EXPECT_TRUE(planner_->request_finished("rC"));
  EXPECT_TRUE(planner_->update_connector_output(connector_output{step_, {}}).ok());
  EXPECT_EQ(planner_->take_request_completions().finished_sending, std::vector<std::string>{"rC"});
  EXPECT_EQ(planner_->tracked_requests(), 0u);
}

// repro-event-grouping: rA stores one block per step; at finished_sending R1 completes both in
// one call (one BlockStored [101, 102]), kvconnect per job (BlockStored [101], BlockStored
// [102]): the same blocks, and equal once consecutive events of one type are merged.
TEST_F(ConnectorR1ReproTest, OneStoredEventPerJob) {
  const auto a = request("rA", {101, 102});
  (void)planner_->get_num_new_matched_tokens(a.view(), 0);
  const std::vector<gpu_block> a_blocks{1, 2};
  auto m = step({{a.view(), a_blocks, 0, 4}}, {});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks, std::vector<gpu_block>{1});
  EXPECT_EQ(m.stores[0].block_indices, per_group{0});
  m = step({}, {{a.view(), {}, 4, 4}});
  ASSERT_EQ(m.stores.size(), 1u);
  EXPECT_EQ(m.stores[0].gpu_blocks, std::vector<gpu_block>{2});
  EXPECT_EQ(m.stores[0].block_indices, per_group{1});
  EXPECT_TRUE(step({}, {}).stores.empty());
  EXPECT_TRUE(planner_->request_finished("rA"));
  finished_sending({"rA"});
  EXPECT_EQ(events(), (std::vector<ev>{{kv_event_kind::stored, keys({101})},
                                       {kv_event_kind::stored, keys({102})}}));
  EXPECT_EQ(planner_->tracked_requests(), 0u);
}

// --- a seeded random workload: global invariants ---------------------------------------------

TEST_F(PlannerTest, RandomWorkloadCompletesEveryJobOnceAndLeavesNothingPinned) {
  constexpr uint32_t kCapacity = 8;  // small: evictions and refused stores happen
  make(kCapacity, /*prefix_caching=*/true);
  std::mt19937 rng(20240601);
  auto coin = [&](double p) { return std::uniform_real_distribution<>(0.0, 1.0)(rng) < p; };
  auto below = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };

  enum class phase { waiting, loading, running };
  struct live {
    test_request r;
    phase at = phase::waiting;
    uint32_t computed = 0;  // tokens on the GPU
    uint32_t target = 0;    // finish at this many tokens
    uint32_t loading = 0;   // tokens being loaded
  };
  std::map<std::string, live> reqs;
  struct due_result {
    step_id due;
    job_result res;
  };
  std::vector<due_result> results;
  std::set<job_id> outstanding;  // jobs handed out, result not delivered yet
  std::set<std::string> owe_sending, owe_recving;
  uint32_t serial = 0;

  auto finish = [&](const std::string& id) {
    if (planner_->request_finished(id)) owe_sending.insert(id);
    reqs.erase(id);
  };

  std::vector<job_id> failed_unflushed;  // in result order
  for (int t = 0; t < 600; ++t) {
    const bool draining = t >= 500;
    // Results due now (a flushed job's result always arrives the step after its flush).
    connector_output out{step_, {}};
    for (auto it = results.begin(); it != results.end();) {
      if (it->due > step_) {
        ++it;
        continue;
      }
      out.jobs.push_back(it->res);
      ASSERT_EQ(outstanding.erase(it->res.job), 1u);
      if (!it->res.ok) failed_unflushed.push_back(it->res.job);
      it = results.erase(it);
    }
    ASSERT_TRUE(planner_->update_connector_output(out).ok());
    auto done = planner_->take_request_completions();
    for (const auto& id : done.finished_sending) ASSERT_EQ(owe_sending.erase(id), 1u) << id;
    for (const auto& id : done.finished_recving) {
      ASSERT_EQ(owe_recving.erase(id), 1u) << id;
      auto it = reqs.find(id);
      if (it == reqs.end()) continue;  // aborted while loading
      ASSERT_EQ(it->second.at, phase::loading);
      it->second.at = phase::waiting;
      it->second.computed += it->second.loading;  // the prefix is now on the GPU
    }
    if (!done.invalid_block_ids.empty()) {
      // Failed loads: their requests recompute from scratch (truncated at the first bad block).
      for (auto& [id, l] : reqs) {
        for (gpu_block b : l.r.blocks) {
          if (std::find(done.invalid_block_ids.begin(), done.invalid_block_ids.end(), b) !=
              done.invalid_block_ids.end())
            l.computed = 0;
        }
      }
    }

    // Arrivals: one of 3 shared 24-token prefixes plus a unique tail.
    if (!draining && coin(0.6)) {
      auto tokens = prompt(24, 1000 * (1 + below(3)));
      for (uint32_t i = 0, n = below(30); i < n; ++i) tokens.push_back(50000 + 100 * serial + i);
      live l{test_request{"r" + std::to_string(serial++), tokens}};
      l.target = static_cast<uint32_t>(l.r.tokens.size()) + 1 + below(25);
      reqs.emplace(l.r.id, std::move(l));
    }
    // Aborts and preemptions.
    std::vector<std::string> preempted_ids;
    for (auto it = reqs.begin(); it != reqs.end();) {
      auto next = std::next(it);
      if (draining || coin(0.02)) {
        finish(it->first);
      } else if (it->second.at == phase::running && coin(0.04)) {
        preempted_ids.push_back(it->first);
        it->second.at = phase::waiting;
        it->second.computed = 0;
        it->second.r.blocks.clear();
      }
      it = next;
    }

    // Scheduling.
    std::vector<std::vector<gpu_block>> fresh_ids;
    fresh_ids.reserve(reqs.size());
    std::vector<scheduled_request> fresh_reqs, cached;
    for (auto& [id, l] : reqs) {
      const auto n = static_cast<uint32_t>(l.r.tokens.size());
      if (std::find(preempted_ids.begin(), preempted_ids.end(), id) != preempted_ids.end())
        continue;  // not rescheduled in the step that preempted it
      if (l.at == phase::waiting) {
        const auto m = planner_->get_num_new_matched_tokens(l.r.view(), l.computed);
        ASSERT_EQ(m.is_async, m.tokens.value_or(0) > 0);
        if (!m.tokens) continue;  // being loaded for another request: ask again
        l.r.blocks.clear();
        l.r.alloc(n, next_block_);
        if (*m.tokens > 0) {
          ASSERT_TRUE(planner_->update_state_after_alloc(l.r.view(), l.r.blocks, *m.tokens).ok());
          l.at = phase::loading;
          l.loading = *m.tokens;
          owe_recving.insert(id);
          continue;
        }
        l.at = phase::running;
        fresh_reqs.push_back({l.r.view(), l.r.blocks, l.computed, n - l.computed, false});
      } else if (l.at == phase::running) {
        fresh_ids.push_back(l.r.alloc(n, next_block_));
        cached.push_back({l.r.view(), fresh_ids.back(), l.computed, n - l.computed, false});
      }
    }
    std::vector<std::string_view> preempted(preempted_ids.begin(), preempted_ids.end());
    auto meta = planner_->build_connector_meta(step_input{step_, fresh_reqs, cached, preempted});
    ASSERT_TRUE(meta.ok()) << meta.error().to_string();
    // First the jobs failed since the last metadata (another rank may still be moving their
    // bytes), each once, then the preempted requests' jobs in flight.
    ASSERT_GE(meta->flush.size(), failed_unflushed.size());
    ASSERT_TRUE(std::equal(failed_unflushed.begin(), failed_unflushed.end(), meta->flush.begin()));
    ASSERT_EQ(meta->failed, failed_unflushed);  // named failed, once
    meta->flush.erase(meta->flush.begin(),
                      meta->flush.begin() + static_cast<ptrdiff_t>(failed_unflushed.size()));
    failed_unflushed.clear();
    for (job_id j : meta->flush) {
      ASSERT_TRUE(outstanding.contains(j)) << j;
      for (auto& r : results) {
        if (r.res.job == j) r.due = step_ + 1;  // the workers waited for it
      }
    }
    for (const auto* jobs : {&meta->loads, &meta->stores}) {
      for (const auto& j : *jobs) {
        ASSERT_EQ(j.gpu_blocks.size(), j.slots.size() * 3 - j.skip);
        ASSERT_TRUE(outstanding.insert(j.id).second);
        results.push_back({step_ + 1 + below(3), job_result{j.id, j.kind, !coin(0.1)}});
      }
    }
    ++step_;

    // Sampling: scheduled requests computed their tokens; they finish or gain one.
    for (auto it = reqs.begin(); it != reqs.end();) {
      auto next = std::next(it);
      auto& l = it->second;
      if (l.at == phase::running) {
        l.computed = static_cast<uint32_t>(l.r.tokens.size());
        if (l.computed >= l.target)
          finish(it->first);
        else
          l.r.append(1, 7 + below(5));
      }
      it = next;
    }
  }
  // Drain the remaining results.
  connector_output out{step_, {}};
  for (const auto& r : results) out.jobs.push_back(r.res);
  ASSERT_TRUE(planner_->update_connector_output(out).ok());
  auto done = planner_->take_request_completions();
  for (const auto& id : done.finished_sending) ASSERT_EQ(owe_sending.erase(id), 1u) << id;
  for (const auto& id : done.finished_recving) ASSERT_EQ(owe_recving.erase(id), 1u) << id;

  EXPECT_TRUE(reqs.empty());
  EXPECT_TRUE(owe_sending.empty());
  EXPECT_TRUE(owe_recving.empty());
  EXPECT_EQ(planner_->jobs_in_flight(), 0u);
  EXPECT_EQ(planner_->tracked_requests(), 0u);
  const auto& st = planner_->stats();
  EXPECT_EQ(st.loads_ok + st.loads_failed, st.loads_planned);
  EXPECT_EQ(st.stores_ok + st.stores_failed, st.stores_planned);
  // The run exercised what it is meant to.
  EXPECT_GT(st.loads_failed, 0u);
  EXPECT_GT(st.stores_failed, 0u);
  EXPECT_GT(st.loads_ok, 10u);
  EXPECT_GT(st.store_retries, 0u);
  EXPECT_GT(st.deferred, 0u);
  // Nothing is left pinned or pending: the whole pool can be taken by fresh keys.
  std::vector<block_key> fresh;
  for (uint32_t i = 0; i < kCapacity; ++i) fresh.push_back(block_key::from_index(1'000'000 + i));
  EXPECT_TRUE(mgr_->prepare_store(fresh).has_value());
}

}  // namespace
}  // namespace kvc::scheduler
