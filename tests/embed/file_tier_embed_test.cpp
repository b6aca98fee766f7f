// The file tier end to end through the embedding API: a scheduler side and two in-process ranks
// over the memory transport, a pool of two slots, a tier directory under /tmp. Blocks cascade to
// files, come back through a file check and a promotion, and load byte for byte; a corrupt file
// is a miss and never loaded; a restart finds its blocks. Every rank waits for its tier jobs in
// each step (finish_tier_jobs), so each step's outcome is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "actors/worker/tier_io.hpp"
#include "cuda/manual_copy_engine.hpp"
#include "disk/block_file.hpp"
#include "tests/disk/scratch_dirs.hpp"
#include "tests/embed/kv_pattern.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::embed {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t bs = 4;  // tokens per block (GPU = offloaded)
constexpr uint32_t token_bytes = 8;
constexpr uint64_t page = uint64_t{bs} * token_bytes;
constexpr uint32_t num_blocks = 16;
constexpr uint32_t pool_slots = 2;
constexpr uint32_t tp = 2;

/// The bytes the test's "forward" writes into GPU block b of rank r for request tag t.
std::vector<std::byte> pattern(uint64_t t, rank_id r, gpu_block b) {
  return test::kv_pattern(t, r, b, page);
}

std::vector<block_key> keys(std::initializer_list<uint64_t> ids) {
  std::vector<block_key> out;
  for (uint64_t i : ids) out.push_back(block_key::from_index(i));
  return out;
}

/// A rank's tier_io that holds every read (a promotion's) and every removal submitted while
/// `holding`, as a slow disk would, until release(): the reads first, then the removals.
/// cancel() withdraws held ones (not started). The rest goes to the real I/O. wait_completions
/// releases what it holds first (held I/O is on its way).
class holding_tier_io final : public worker::tier_io {
 public:
  explicit holding_tier_io(std::unique_ptr<worker::tier_io> real) : real_(std::move(real)) {}

  void submit_write(uint64_t t, const block_key& k, std::span<const char> payload) override {
    real_->submit_write(t, k, payload);
  }
  void submit_read(uint64_t t, const block_key& k, std::span<char> into) override {
    if (holding) {
      held_.push_back({t, k, into});
      return;
    }
    real_->submit_read(t, k, into);
  }
  void submit_check(uint64_t t, const block_key& k) override { real_->submit_check(t, k); }
  void submit_remove(uint64_t t, const block_key& k) override {
    if (holding) {
      held_removals_.push_back({t, k, {}});
      return;
    }
    real_->submit_remove(t, k);
  }
  std::vector<uint64_t> cancel(std::span<const uint64_t> tickets) override {
    std::vector<uint64_t> out = real_->cancel(tickets);
    std::erase_if(held_, [&](const held_io& r) {
      if (std::find(tickets.begin(), tickets.end(), r.ticket) == tickets.end()) return false;
      out.push_back(r.ticket);
      return true;
    });
    return out;
  }
  std::vector<disk::io_completion> take_completions() override { return real_->take_completions(); }
  std::vector<disk::io_completion> wait_completions() override {
    release();
    return real_->wait_completions();
  }

  void release() {
    for (const held_io& r : std::exchange(held_, {})) real_->submit_read(r.ticket, r.key, r.into);
    for (const held_io& r : std::exchange(held_removals_, {}))
      real_->submit_remove(r.ticket, r.key);
  }
  size_t held() const noexcept { return held_.size(); }

  bool holding = false;

 private:
  struct held_io {
    uint64_t ticket = 0;
    block_key key;
    std::span<char> into;
  };
  std::unique_ptr<worker::tier_io> real_;
  std::vector<held_io> held_;  ///< reads
  std::vector<held_io> held_removals_;
};

struct rank_kv {
  std::unique_ptr<worker_connector> wc;
  cuda::device_buffer buf;
  std::byte* block(gpu_block b) const { return static_cast<std::byte*>(buf.data) + b * page; }
  cuda::manual_copy_engine& engine() const {
    return dynamic_cast<cuda::manual_copy_engine&>(wc->copy_engine());
  }
  std::vector<std::byte> read(gpu_block b) const {
    std::vector<std::byte> out(page);
    EXPECT_TRUE(wc->copy_engine().download(out.data(), block(b), page).ok());
    return out;
  }
};

class FileTierEmbedTest : public shm::testing::ShmTest {
 protected:
  file_tier_config tier() const {
    return {.root_dir = dir_.path(),
            .capacity_bytes = 64 * disk::file_bytes(page),
            .n_read_threads = 2,
            .n_write_threads = 2,
            .max_pending_cascades = 64,
            .direct_io = true,
            .kv_description = "file tier embed test"};
  }
  pool_config pool() const {
    return {.instance = instance_, .slots_per_rank = pool_slots, .slot_bytes = page};
  }

  /// A scheduler side and its two ranks, every KV cache registered. `ranks_have_tier` false:
  /// only the scheduler side has the tier (a misconfigured deployment).
  void start(bool ranks_have_tier = true) {
    scheduler_connector_config c;
    c.transport = step_transport::memory;
    c.listen = false;
    c.token = "secret";
    c.topology.tp_size = tp;
    c.pool = pool();
    c.planner.gpu_block_size = bs;
    c.file_tier = tier();
    c.observe = observe_;
    auto sc = scheduler_connector::create(c);
    ASSERT_TRUE(sc.ok()) << sc.error().to_string();
    sc_ = std::move(*sc);
    for (rank_id r = 0; r < tp; ++r) {
      worker_connector_config w;
      w.mode = connection_mode::in_process;
      w.token = "secret";
      w.topology.tp_size = tp;
      w.pool = pool();
      w.rank = r;
      if (ranks_have_tier) w.file_tier = tier();
      w.faults = faults_;
      if (r == 1) {
        w.wrap_tier_io = [this](std::unique_ptr<worker::tier_io> real) {
          auto held = std::make_unique<holding_tier_io>(std::move(real));
          rank1_io_ = held.get();
          return std::unique_ptr<worker::tier_io>{std::move(held)};
        };
      }
      w.make_copy_engine = []() -> result<std::unique_ptr<cuda::copy_engine>> {
        return std::unique_ptr<cuda::copy_engine>{new cuda::manual_copy_engine()};
      };
      auto wc = worker_connector::create(w, sc_.get());
      ASSERT_TRUE(wc.ok()) << wc.error().to_string();
      auto buf = (*wc)->copy_engine().allocate_device(num_blocks * page);
      ASSERT_TRUE(buf.ok()) << buf.error().to_string();
      const cuda::kv_tensor_desc desc{reinterpret_cast<uintptr_t>(buf->data),
                                      {num_blocks, bs, token_bytes},
                                      {static_cast<int64_t>(page), token_bytes, 1},
                                      1,
                                      0};
      ASSERT_TRUE((*wc)->register_kv_caches({&desc, 1}).ok());
      ranks_.push_back({std::move(*wc), *buf});
    }
    ASSERT_TRUE(sc_->wait_for_workers(5s).ok());
  }

  /// Ends the run: the ranks, then the scheduler side (the tier's files stay).
  void stop() {
    auto stopped = sc_->shutdown(5s);
    EXPECT_TRUE(stopped.ok()) << stopped.error().to_string();
    ranks_.clear();
    sc_.reset();
  }

  /// One engine step; every rank finishes its tier jobs inside it. Returns the step's output.
  connector_update step(std::vector<scheduler::scheduled_request> fresh = {},
                        std::vector<std::pair<gpu_block, uint64_t>> writes = {}) {
    const step_id s = next_step_++;
    auto meta = sc_->build_connector_meta({s, fresh, {}, {}});
    EXPECT_TRUE(meta.ok()) << meta.error().to_string();
    if (meta.ok()) last_meta_ = *meta;
    for (auto& rk : ranks_) {
      worker_connector& w = *rk.wc;
      EXPECT_TRUE(w.bind_connector_metadata(s, 5s).ok());
      EXPECT_TRUE(w.handle_preemptions().ok());
      EXPECT_TRUE(w.start_load_kv().ok());
      rk.engine().advance_all();
      for (auto [b, tag] : writes) {
        const auto bytes = pattern(tag, w.rank(), b);
        EXPECT_TRUE(w.copy_engine().upload(rk.block(b), bytes.data(), page).ok());
      }
      EXPECT_TRUE(w.wait_for_save().ok());
      // A rank whose reads are held cannot finish them: it reports what is done.
      if (!(w.rank() == 1 && rank1_io_ != nullptr && rank1_io_->holding)) w.finish_tier_jobs();
      w.get_finished({});
      EXPECT_TRUE(w.get_block_ids_with_load_errors().empty());
      w.clear_connector_metadata();
    }
    auto out = sc_->update_connector_output(s, 5s);
    EXPECT_TRUE(out.ok()) << out.error().to_string();
    return out.ok() ? std::move(*out) : connector_update{};
  }

  /// Prefills a request of `ks` in GPU blocks `blocks` with tag `tag`, stores it (two steps)
  /// and cascades it (a third).
  void store_and_cascade(const std::string& id, const std::vector<block_key>& ks,
                         const std::vector<gpu_block>& blocks, uint64_t tag) {
    const scheduler::request_view r{id, ks, static_cast<uint32_t>(ks.size() * bs)};
    EXPECT_EQ(sc_->get_num_new_matched_tokens(r, 0), (scheduler::match_result{0u, false}));
    std::vector<std::pair<gpu_block, uint64_t>> writes;
    for (gpu_block b : blocks) writes.emplace_back(b, tag);
    step({{r, blocks, 0, r.num_tokens}}, writes);
    EXPECT_EQ(last_meta_.stores.size(), 1u);
    EXPECT_TRUE(sc_->request_finished(id));
    step();  // the store runs
    step();  // the cascade runs
    EXPECT_EQ(last_meta_.tier_jobs.size(), 1u);
    for (const block_key& k : ks) EXPECT_TRUE(sc_->planner().tier()->ready(k));
  }

  /// Asks for `r` until the pool answers (at most `steps` steps): the answers before it.
  std::vector<scheduler::match_result> ask_until_answered(const scheduler::request_view& r,
                                                          int steps) {
    std::vector<scheduler::match_result> seen;
    for (int i = 0; i <= steps; ++i) {
      const auto got = sc_->get_num_new_matched_tokens(r, 0);
      seen.push_back(got);
      if (got.tokens) break;
      step();
    }
    return seen;
  }

  std::string file_of(rank_id r, const block_key& k) const {
    const std::string name = disk::file_name(k);
    const std::string description = tier_run_description(tier(), pool(), {.tp_size = tp}, 1);
    return dir_.path() + "/" + disk::digest_of(description).hex() + "/" + std::to_string(r) + "/" +
           name.substr(0, 2) + "/" + name;
  }

  disk::testing::scratch_dir dir_{"/tmp"};
  observe_config observe_;  // the scheduler side's observers (none by default)
  fault_config faults_;     // every rank's injected faults (none by default)
  holding_tier_io* rank1_io_ = nullptr;  // rank 1's tier I/O, owned by its worker_connector
  const std::string instance_ = shm::testing::test_instance_prefix() + "tier";
  std::unique_ptr<scheduler_connector> sc_;
  std::vector<rank_kv> ranks_;
  connector_metadata last_meta_;
  step_id next_step_ = 1;
};

TEST_F(FileTierEmbedTest, EvictedBlocksArePromotedBackAndLoadByteForByte) {
  ASSERT_FALSE(dir_.path().empty());
  start();
  const auto ka = keys({11, 12});
  store_and_cascade("a", ka, {1, 2}, 100);
  for (rank_id r = 0; r < tp; ++r) {
    for (const auto& k : ka) EXPECT_TRUE(std::filesystem::exists(file_of(r, k))) << r;
  }
  const auto events = sc_->take_events();  // the pool's stored event, then the tier's
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].where, medium::cpu);
  EXPECT_EQ(events[1].where, medium::fs);
  EXPECT_EQ(events[1].kind, kv_event_kind::stored);
  EXPECT_EQ(events[1].keys, ka);
  store_and_cascade("c", keys({21, 22}), {3, 4}, 200);  // the pool's two slots: a is evicted

  // b shares a's prefix: a file check, a promotion, then a pool hit.
  const scheduler::request_view b{"b", ka, 9};
  const auto answers = ask_until_answered(b, 4);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[0], (scheduler::match_result{std::nullopt, false}));  // checking the files
  EXPECT_EQ(answers[1], (scheduler::match_result{std::nullopt, false}));  // promoting
  EXPECT_EQ(answers[2], (scheduler::match_result{8u, true}));
  ASSERT_TRUE(sc_->update_state_after_alloc(b, std::vector<gpu_block>{5, 6, 7}, 8).ok());
  const auto out = step();
  ASSERT_EQ(last_meta_.loads.size(), 1u);
  EXPECT_EQ(out.completions.finished_recving, std::vector<std::string>{"b"});
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(5), pattern(100, rk.wc->rank(), 1)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.read(6), pattern(100, rk.wc->rank(), 2)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.wc->tier_stats().bytes_read, 2 * page);
    EXPECT_EQ(rk.wc->tier_stats().bytes_written, 4 * page);
  }
  const auto t = sc_->planner().tier_counters();
  EXPECT_EQ(t.ledger.promotions_ok, 2u);
  EXPECT_EQ(t.ledger.cascades_ok, 4u);
  // The tiering series: each job's bytes summed over both ranks.
  const std::string text = sc_->metrics_text();
  for (const std::string& line : {
           "vllm:kv_offload_tiering_write_bytes_total{tier=\"1:fs\"} " + std::to_string(8 * page),
           "vllm:kv_offload_tiering_read_bytes_total{tier=\"1:fs\"} " + std::to_string(4 * page),
           "vllm:kv_offload_tiering_block_hits_total{tier=\"1:fs\"} " +
               std::to_string(t.ledger.hits),
           std::string{"vllm:kv_offload_tiering_promotion_job_failures_total{tier=\"1:fs\"} 0"},
       }) {
    EXPECT_NE(text.find("\n" + line + "\n"), std::string::npos) << line;
  }
  EXPECT_GT(t.ledger.hits, 0u);
  EXPECT_FALSE(sc_->request_finished("b"));
  stop();
}

TEST_F(FileTierEmbedTest, TheTraceShowsTheTiersJobsOnTheirOwnTracks) {
  ASSERT_FALSE(dir_.path().empty());
  disk::testing::scratch_dir trace_dir{"/tmp"};
  ASSERT_FALSE(trace_dir.path().empty());
  observe_.trace = trace::trace_level::jobs;
  observe_.trace_dir = trace_dir.path();
  start();
  store_and_cascade("a", keys({11, 12}), {1, 2}, 100);
  store_and_cascade("c", keys({21, 22}), {3, 4}, 200);  // a is evicted from the pool
  const auto answers = ask_until_answered({"b", keys({11, 12}), 9}, 4);
  EXPECT_EQ(answers.back(), (scheduler::match_result{8u, true}));  // checked, promoted, a hit
  stop();

  // (track, type) -> records, from the scheduler's trace file
  std::map<std::pair<std::string, std::string>, int> seen;
  for (const auto& e : std::filesystem::directory_iterator(trace_dir.path())) {
    if (!e.path().filename().string().starts_with("scheduler-")) continue;
    std::ifstream in(e.path());
    for (std::string line; std::getline(in, line);) {
      for (const char* track : {"scheduler", "tier cascade", "tier promotion", "tier check"}) {
        if (line.find("\"track\":\"" + std::string{track} + "\"") == std::string::npos) continue;
        for (const char* type : {"job_planned", "job_applied"}) {
          if (line.find("\"type\":\"" + std::string{type} + "\"") != std::string::npos) {
            ++seen[{track, type}];
          }
        }
      }
    }
  }
  const std::map<std::pair<std::string, std::string>, int> want{
      {{"scheduler", "job_planned"}, 2},  // the two stores
      {{"scheduler", "job_applied"}, 2},
      {{"tier cascade", "job_planned"}, 2},
      {{"tier cascade", "job_applied"}, 2},
      {{"tier check", "job_planned"}, 2},  // one per block file
      {{"tier check", "job_applied"}, 2},
      {{"tier promotion", "job_planned"}, 1},
      {{"tier promotion", "job_applied"}, 1}};
  EXPECT_EQ(seen, want);
}

TEST_F(FileTierEmbedTest, ACorruptFileIsAMissAndIsNeverLoaded) {
  ASSERT_FALSE(dir_.path().empty());
  start();
  const auto ka = keys({11, 12});
  store_and_cascade("a", ka, {1, 2}, 100);
  store_and_cascade("c", keys({21, 22}), {3, 4}, 200);
  {  // one byte of rank 1's KV of block 11 flipped on disk
    std::fstream f(file_of(1, ka[0]), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekg(static_cast<std::streamoff>(disk::header_bytes + 5));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(disk::header_bytes + 5));
    f.write(&c, 1);
  }
  const scheduler::request_view b{"b", ka, 9};
  const auto answers = ask_until_answered(b, 4);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[2], (scheduler::match_result{0u, false}));  // recomputed, nothing loaded
  const auto t = sc_->planner().tier_counters();
  EXPECT_EQ(t.ledger.promotions_failed, 2u);  // the promotion job of both blocks failed
  step();  // the files of the dropped blocks are removed on every rank
  for (rank_id r = 0; r < tp; ++r) {
    for (const auto& k : ka) EXPECT_FALSE(std::filesystem::exists(file_of(r, k))) << r;
  }
  EXPECT_FALSE(sc_->request_finished("b"));
  stop();
}

TEST_F(FileTierEmbedTest, ARestartFindsItsBlocksOnDisk) {
  ASSERT_FALSE(dir_.path().empty());
  start();
  const auto ka = keys({11, 12});
  store_and_cascade("a", ka, {1, 2}, 100);
  stop();

  start();  // a new pool, empty; the same tier directory
  EXPECT_EQ(sc_->planner().tier()->size(), 2u);
  const scheduler::request_view b{"b", ka, 9};
  const auto answers = ask_until_answered(b, 4);
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_EQ(answers[2], (scheduler::match_result{8u, true}));
  ASSERT_TRUE(sc_->update_state_after_alloc(b, std::vector<gpu_block>{5, 6, 7}, 8).ok());
  step();
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(5), pattern(100, rk.wc->rank(), 1)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.read(6), pattern(100, rk.wc->rank(), 2)) << "rank " << rk.wc->rank();
  }
  EXPECT_FALSE(sc_->request_finished("b"));
  stop();
}

TEST_F(FileTierEmbedTest, AfterARestartABlockOneRankLacksIsAMiss) {
  ASSERT_FALSE(dir_.path().empty());
  start();
  const auto ka = keys({11, 12});
  store_and_cascade("a", ka, {1, 2}, 100);
  stop();
  ASSERT_TRUE(std::filesystem::remove(file_of(1, ka[0])));  // rank 1 lost block 11's file

  start();
  EXPECT_EQ(sc_->planner().tier()->size(), 2u);  // rank 0's directory holds both
  const scheduler::request_view b{"b", ka, 9};
  const auto answers = ask_until_answered(b, 4);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0], (scheduler::match_result{std::nullopt, false}));  // checking the files
  EXPECT_EQ(answers[1], (scheduler::match_result{0u, false}));  // 11 missing on rank 1: recompute
  EXPECT_FALSE(sc_->planner().tier()->ready(ka[0]));
  EXPECT_TRUE(sc_->planner().tier()->ready(ka[1]));
  EXPECT_EQ(sc_->planner().tier_counters().ledger.dropped_bad_file, 1u);
  EXPECT_FALSE(sc_->request_finished("b"));
  stop();
}

TEST_F(FileTierEmbedTest, RanksWithoutATierFailItsJobsAtOnce) {
  ASSERT_FALSE(dir_.path().empty());
  start(/*ranks_have_tier=*/false);
  const auto ka = keys({11, 12});
  const scheduler::request_view a{"a", ka, 8};
  EXPECT_EQ(sc_->get_num_new_matched_tokens(a, 0), (scheduler::match_result{0u, false}));
  step({{a, std::vector<gpu_block>{1, 2}, 0, 8}}, {{1, 100}, {2, 100}});
  EXPECT_TRUE(sc_->request_finished("a"));
  step();  // the store runs
  const auto out = step();  // the cascade is refused by both ranks in its own step
  ASSERT_EQ(out.jobs.size(), 1u);
  EXPECT_EQ(out.jobs[0].kind, transfer_kind::cascade);
  EXPECT_FALSE(out.jobs[0].ok);
  EXPECT_EQ(out.jobs[0].error, errc::precondition_failed);
  EXPECT_NE(out.jobs[0].detail.find("has no file tier"), std::string::npos);
  EXPECT_EQ(sc_->planner().tier_counters().ledger.cascades_failed, 2u);
  EXPECT_EQ(sc_->planner().manager().busy(), 0u);  // unpinned: the pool goes on
  stop();
}

// A job fails at the first rank that reports a failure while another rank's I/O of it may still
// run (docs/disk_tier.md, "Failed jobs"). Here rank 0 fails a promotion at once (fail_io) while
// rank 1's reads of it are held, as a slow disk would hold them; its slots are freed and the
// next step stores another request there (and removes the promotion's files, a removal that
// rank 1's slow disk holds too). Rank 1 must end its reads when it binds that step (cancelled:
// not started), so the late bytes of the promotion never land on the new blocks, which load
// byte for byte on both ranks.
TEST_F(FileTierEmbedTest, APromotionFailedOnOneRankIsFlushedOnTheOtherBeforeItsSlotsAreReused) {
  ASSERT_FALSE(dir_.path().empty());
  // Rank 0's reads: the two file checks (0, 1), then the promotion (2), which fails.
  faults_.specs = {{.kind = fault_kind::fail_io,
                    .rank = 0,
                    .op = fault_io_op::read,
                    .trigger = fault_trigger::nth,
                    .nth = 2}};
  start();
  ASSERT_NE(rank1_io_, nullptr);
  const auto ka = keys({11, 12});
  store_and_cascade("a", ka, {1, 2}, 100);
  store_and_cascade("c", keys({21, 22}), {3, 4}, 200);  // a is evicted from the pool
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ(sc_->get_num_new_matched_tokens(b, 0), (scheduler::match_result{std::nullopt, false}));
  step();  // the file checks
  EXPECT_EQ(sc_->get_num_new_matched_tokens(b, 0), (scheduler::match_result{std::nullopt, false}));
  rank1_io_->holding = true;
  step();  // the promotion into both slots: failed on rank 0, rank 1's reads held
  ASSERT_EQ(last_meta_.tier_jobs.size(), 1u);
  const tier_job promotion = last_meta_.tier_jobs[0];
  ASSERT_EQ(promotion.kind, transfer_kind::promotion);
  EXPECT_EQ(rank1_io_->held(), 2u);
  EXPECT_EQ(sc_->planner().tier_counters().ledger.promotions_failed, 2u);
  EXPECT_EQ(sc_->planner().manager().size(), 0u);  // its slots are free

  // d is computed and stored into those slots; its metadata flushes the promotion.
  const auto kd = keys({31, 32});
  const scheduler::request_view d{"d", kd, 8};
  EXPECT_EQ(sc_->get_num_new_matched_tokens(d, 0), (scheduler::match_result{0u, false}));
  const std::vector<gpu_block> d_blocks{7, 8};
  step({{d, d_blocks, 0, d.num_tokens}}, {{7, 300}, {8, 300}});
  EXPECT_EQ(last_meta_.flush, std::vector<job_id>{promotion.id});
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  auto sorted = [](std::vector<cpu_slot> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(sorted(last_meta_.stores[0].slots), sorted(promotion.slots));  // reused
  EXPECT_EQ(rank1_io_->held(), 0u);  // withdrawn when rank 1 bound the step
  EXPECT_EQ(ranks_[1].wc->tier_stats().blocks_cancelled, 2u);
  EXPECT_TRUE(sc_->request_finished("d"));
  step();  // d's store runs
  rank1_io_->holding = false;
  rank1_io_->release();  // anything still held lands now, after d's store
  step();                // d's cascade; every rank finishes its tier I/O

  // e shares d's prefix: a pool hit, loaded byte for byte on both ranks.
  const scheduler::request_view e{"e", kd, 9};
  EXPECT_EQ(sc_->get_num_new_matched_tokens(e, 0), (scheduler::match_result{8u, true}));
  ASSERT_TRUE(sc_->update_state_after_alloc(e, std::vector<gpu_block>{9, 10, 11}, 8).ok());
  step();
  ASSERT_EQ(last_meta_.loads.size(), 1u);
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(9), pattern(300, rk.wc->rank(), 7)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.read(10), pattern(300, rk.wc->rank(), 8)) << "rank " << rk.wc->rank();
  }
  stop();
}

TEST(FileTierEmbedConfigTest, ATierCannotBeRecordedAndNeedsItsFields) {
  scheduler_connector_config c;
  c.token = "t";
  c.pool = {.instance = "x", .slots_per_rank = 2, .slot_bytes = 64};
  c.file_tier = file_tier_config{.root_dir = "/tmp", .capacity_bytes = 1 << 20};
  EXPECT_TRUE(validate(c).ok());
  c.observe.record = true;
  c.observe.record_dir = "/tmp";
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c.observe.record = false;
  c.file_tier->root_dir.clear();
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
  c.file_tier->root_dir = "/tmp";
  c.file_tier->n_read_threads = 0;
  EXPECT_EQ(validate(c).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::embed
