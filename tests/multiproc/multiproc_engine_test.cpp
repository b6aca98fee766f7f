// An engine over real processes, driven through the embedding API: this test process is the
// engine's scheduler (scheduler_connector, hosting the scheduler actor and the coordinator and
// listening on loopback), and four kvc_mp_worker processes are its TP=2 x PP=2 workers
// (worker_connector, connect mode, sim backend). For 300+ steps a prefix-sharing workload runs
// with a GPU prefix cache small enough that prefixes fall out of it and come back from the CPU
// pool. The worker processes check every loaded token against the model's KV and every stored
// slot against the GPU blocks it came from; at the end the pool's ledger has no pinned or
// pending slot, every process has exited cleanly and been reaped, and no shm segment is left.
//
// Synchronisation is by messages only: each step the engine waits for every worker's answer
// line (poll with a deadline) and for the step's aggregated output (a queue with a deadline).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "launch/engines/sim/gpu_block_pool.hpp"
#include "tests/connector/recording_manager.hpp"
#include "tests/multiproc/mp_protocol.hpp"
#include "tests/shm/shm_entries.hpp"
#include "tests/support/child_process.hpp"

namespace kvc::mp {
namespace {

using namespace std::chrono_literals;
using testing::child_process;

constexpr uint32_t arrival_steps = 240;  // one new request per step until here
constexpr uint32_t min_steps = 300;
/// A step that computes nothing drains the workers' transfers, so the run is idle a few steps
/// after min_steps; this many more steps mean it is broken.
constexpr uint32_t drain_steps = 100;

uint32_t cdiv(uint32_t a, uint32_t b) {
  return (a + b - 1) / b;
}

struct request {
  enum class state { waiting, loading, running, holding, done };
  std::string id;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> th;       // th[p]: hash of tokens [0, p]
  std::vector<block_key> hashes;  // one per full GPU block
  uint32_t max_new = 1;
  uint32_t outputs = 0;
  std::vector<gpu_block> blocks;
  uint32_t computed = 0;
  state st = state::waiting;
  bool ever_scheduled = false;
  bool load_done = false;
  uint32_t load_local = 0;
  uint32_t load_target = 0;

  uint32_t ntok() const { return static_cast<uint32_t>(tokens.size()); }
  void append(uint32_t t) {
    th.push_back(chain(th.empty() ? 0 : th.back(), t));
    tokens.push_back(t);
    if (tokens.size() % gpu_block_size == 0) hashes.push_back(block_hash_of(th.back()));
  }
  scheduler::request_view view() const { return {id, hashes, ntok()}; }
};

/// The engine's scheduler: admission with a GPU prefix cache, the connector's scheduler calls,
/// one step line to every worker process, the step's output applied.
class mp_engine {
 public:
  mp_engine(embed::scheduler_connector& sc, std::vector<child_process>& workers)
      : sc_(sc), workers_(workers), pool_(num_gpu_blocks) {}

  void add(uint32_t i) {
    auto q = std::make_unique<request>();
    q->id = "r" + std::to_string(i);
    const uint32_t prefix = (i / 3) % 6;  // bursts share GPU blocks, returns need the CPU pool
    for (uint32_t j = 0; j < 24; ++j) q->append(1000 * (prefix + 1) + j);
    for (uint32_t j = 0; j < 2 + i % 7; ++j) q->append(50000 + i * 16 + j);
    q->max_new = 2 + i % 4;
    waiting_.push_back(q.get());
    requests_.push_back(std::move(q));
  }

  bool idle() const {
    for (const auto& q : requests_) {
      if (q->st != request::state::done) return false;
    }
    return sc_.jobs_in_flight() == 0 && sc_.tracked_requests() == 0;
  }

  ::testing::AssertionResult step() {
    const step_id s = ++step_;
    struct entry {
      request* q;
      uint32_t from;
      uint32_t n;
      bool is_new;
    };
    std::vector<entry> sched;
    step_command cmd;
    cmd.step = s;
    cmd.finished = std::move(finished_prev_);
    finished_prev_.clear();

    for (request* q : running_) sched.push_back({q, q->computed, q->ntok() - q->computed, false});
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request& q = **it;
      if (q.st == request::state::loading) {
        if (!q.load_done) {
          ++it;
          continue;
        }
        for (uint32_t p = q.load_local; p < q.load_target; ++p) {
          cmd.verifies.push_back({q.blocks[p / gpu_block_size], p % gpu_block_size, q.th[p]});
        }
        loaded_tokens_ += q.load_target - q.load_local;
        q.computed = std::min(q.load_target, q.ntok() - 1);  // the last token is recomputed
        cache_full_blocks(q);
      } else {
        const auto hits = pool_.cached_prefix(q.hashes, (q.ntok() - 1) / gpu_block_size);
        const uint32_t local = static_cast<uint32_t>(hits.size()) * gpu_block_size;
        const auto m = sc_.get_num_new_matched_tokens(q.view(), local);
        if (!m.tokens) {
          ++deferred_;
          ++it;
          continue;
        }
        const uint32_t ext = *m.tokens;
        pool_.take(hits);
        const uint32_t need = cdiv(q.ntok() + q.max_new, gpu_block_size);
        auto got = pool_.allocate(need - static_cast<uint32_t>(hits.size()));
        if (!got) {
          pool_.free(hits);
          break;  // FCFS: nobody behind it is admitted either
        }
        q.blocks = hits;
        q.blocks.insert(q.blocks.end(), got->begin(), got->end());
        if (auto st = sc_.update_state_after_alloc(q.view(), q.blocks, ext); !st) {
          return ::testing::AssertionFailure() << "step " << s << ": update_state_after_alloc("
                                               << q.id << "): " << st.to_string();
        }
        q.computed = local;
        gpu_hit_tokens_ += local;
        if (ext > 0) {
          q.st = request::state::loading;
          q.load_local = local;
          q.load_target = local + ext;
          ++it;
          continue;
        }
      }
      q.st = request::state::running;
      sched.push_back({&q, q.computed, q.ntok() - q.computed, !q.ever_scheduled});
      running_.push_back(&q);
      it = waiting_.erase(it);
    }

    cmd.drain = sched.empty();
    // The connector's plan for this step; its metadata is on its way to the workers.
    std::vector<scheduler::scheduled_request> fresh;
    std::vector<scheduler::scheduled_request> cached;
    for (const auto& e : sched) {
      scheduler::scheduled_request sr{e.q->view(), {}, e.from, e.n, false};
      if (e.is_new) sr.block_ids = e.q->blocks;
      (e.is_new ? fresh : cached).push_back(sr);
      e.q->ever_scheduled = true;
      for (uint32_t p = e.from; p < e.from + e.n; ++p) {
        cmd.writes.push_back({e.q->blocks[p / gpu_block_size], p % gpu_block_size, e.q->th[p]});
      }
    }
    auto meta = sc_.build_connector_meta({s, fresh, cached, {}});
    if (!meta) {
      return ::testing::AssertionFailure()
             << "step " << s << ": build_connector_meta: " << meta.error().to_string();
    }
    loads_planned_ += meta->loads.size();

    // The engine's own channel: the step's forward work to every worker, then their answers.
    const std::string line = encode(cmd);
    for (auto& w : workers_) {
      if (auto st = w.write_line(line); !st) {
        return ::testing::AssertionFailure() << "step " << s << ": " << st.to_string();
      }
    }
    for (size_t r = 0; r < workers_.size(); ++r) {
      auto ans = workers_[r].read_line(60s);
      if (!ans) {
        return ::testing::AssertionFailure()
               << "step " << s << ": rank " << r << ": " << ans.error().to_string();
      }
      if (*ans != "A " + std::to_string(s)) {
        return ::testing::AssertionFailure() << "step " << s << ": rank " << r << ": " << *ans;
      }
    }

    // The step's aggregated output: every rank reported it before answering.
    auto upd = sc_.update_connector_output(s, 60s);
    if (!upd) {
      return ::testing::AssertionFailure()
             << "step " << s << ": update_connector_output: " << upd.error().to_string();
    }
    for (const auto& j : upd->jobs) {
      if (!j.ok)
        return ::testing::AssertionFailure()
               << "step " << s << ": job " << j.job << " failed: " << to_string(j.error);
    }
    if (!upd->completions.invalid_block_ids.empty()) {
      return ::testing::AssertionFailure() << "step " << s << ": invalid blocks reported";
    }
    for (const auto& id : upd->completions.finished_recving) {
      request* q = find(id);
      if (q == nullptr || q->st != request::state::loading) {
        return ::testing::AssertionFailure() << "finished_recving for " << id << " not loading";
      }
      q->load_done = true;
    }
    for (const auto& id : upd->completions.finished_sending) {
      request* q = find(id);
      if (q == nullptr || q->st != request::state::holding) {
        return ::testing::AssertionFailure() << "finished_sending for " << id << " not held";
      }
      release(*q);
    }

    // Model output: a new token per computed request; finished requests.
    for (const auto& e : sched) {
      request& q = *e.q;
      q.computed += e.n;
      cache_full_blocks(q);
      tokens_computed_ += e.n;
      if (q.computed < q.ntok()) continue;
      q.append(90000 + static_cast<uint32_t>(block_key::mix(q.th.back()) % 5000));
      if (++q.outputs < q.max_new) continue;
      std::erase(running_, &q);
      q.st = request::state::holding;
      finished_prev_.push_back(q.id);
      if (!sc_.request_finished(q.id)) release(q);
    }
    for (const auto& ev : sc_.take_events()) {
      (ev.kind == kv_event_kind::stored ? stored_keys_ : removed_keys_) += ev.keys.size();
    }
    return ::testing::AssertionSuccess();
  }

  uint64_t loaded_tokens() const { return loaded_tokens_; }
  uint64_t loads_planned() const { return loads_planned_; }
  uint64_t gpu_hit_tokens() const { return gpu_hit_tokens_; }
  uint64_t tokens_computed() const { return tokens_computed_; }
  uint64_t stored_keys() const { return stored_keys_; }
  uint64_t removed_keys() const { return removed_keys_; }
  uint64_t deferred() const { return deferred_; }
  uint32_t free_gpu_blocks() const { return pool_.num_free(); }

 private:
  request* find(const std::string& id) {
    for (auto& q : requests_) {
      if (q->id == id) return q.get();
    }
    return nullptr;
  }
  void release(request& q) {
    pool_.free(q.blocks);
    q.blocks.clear();
    q.st = request::state::done;
  }
  void cache_full_blocks(request& q) {
    const uint32_t full = q.computed / gpu_block_size;
    for (uint32_t i = 0; i < full && i < q.blocks.size(); ++i)
      pool_.cache(q.blocks[i], q.hashes[i]);
  }

  embed::scheduler_connector& sc_;
  std::vector<child_process>& workers_;
  kvc::sim::gpu_block_pool pool_;
  std::vector<std::unique_ptr<request>> requests_;
  std::vector<request*> waiting_;
  std::vector<request*> running_;
  std::vector<std::string> finished_prev_;
  step_id step_ = 0;
  uint64_t loaded_tokens_ = 0;
  uint64_t loads_planned_ = 0;
  uint64_t gpu_hit_tokens_ = 0;
  uint64_t tokens_computed_ = 0;
  uint64_t stored_keys_ = 0;
  uint64_t removed_keys_ = 0;
  uint64_t deferred_ = 0;
};

/// /dev/shm entries of this test's instance.
std::vector<std::string> segments_of(const std::string& instance) {
  return shm::testing::shm_entries(instance);
}

/// Every worker process said "R <rank>": registered, KV cache registered.
void expect_registered(std::vector<child_process>& workers) {
  for (rank_id r = 0; r < world_size; ++r) {
    auto line = workers[r].read_line(60s);
    ASSERT_TRUE(line.ok()) << "rank " << r << ": " << line.error().to_string();
    ASSERT_EQ(*line, "R " + std::to_string(r));
  }
}

/// Jobs of both kinds ran, none failed, no result was rejected, something was loaded.
void expect_clean_run(const scheduler::connector_stats& st, const mp_engine& engine) {
  EXPECT_GT(st.stores_ok, 0u);
  EXPECT_GT(st.loads_ok, 0u);
  EXPECT_EQ(st.stores_failed, 0u);
  EXPECT_EQ(st.loads_failed, 0u);
  EXPECT_EQ(st.rejected_results, 0u);
  EXPECT_GT(engine.loaded_tokens(), 0u);
}

/// What the worker processes counted, from their final "D" lines.
struct worker_totals {
  uint64_t verified = 0;        ///< token x layer x rank checks of loaded KV
  uint64_t stores_checked = 0;  ///< slots compared with the GPU blocks they came from
  uint64_t loads_seen = 0;
  std::vector<uint64_t> slots_by_rank = std::vector<uint64_t>(world_size, 0);
};

/// Tells every worker process to quit, checks each exits cleanly with its totals line.
worker_totals quit_workers(std::vector<child_process>& workers) {
  worker_totals t;
  for (rank_id r = 0; r < world_size; ++r) {
    EXPECT_TRUE(workers[r].write_line("Q").ok());
    auto status = workers[r].wait_exit(60s);
    if (!status.ok()) {
      ADD_FAILURE() << "rank " << r << ": " << status.error().to_string();
      continue;
    }
    EXPECT_EQ(*status, 0) << "rank " << r;
    std::vector<std::string> trailing;  // the lines after the last step's answer
    for (auto line = workers[r].read_line(0s); line.ok(); line = workers[r].read_line(0s)) {
      trailing.push_back(std::move(line).value());
    }
    if (trailing.empty()) {
      ADD_FAILURE() << "rank " << r << " printed no totals";
      continue;
    }
    std::istringstream d(trailing.back());
    std::string tag;
    uint64_t v = 0, slots = 0, ls = 0, ss = 0;
    if (!(d >> tag >> v >> slots >> ls >> ss) || tag != "D") {
      ADD_FAILURE() << trailing.back();
      continue;
    }
    t.verified += v;
    t.stores_checked += slots;
    t.loads_seen += ls;
    t.slots_by_rank[r] = slots;
  }
  return t;
}

/// No shm segment of the run and no child process left unreaped.
void expect_nothing_left(const std::string& instance) {
  EXPECT_TRUE(segments_of(instance).empty());
  errno = 0;
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

/// Arrivals until arrival_steps, then steps until min_steps and drained (or drain_steps more
/// passed, or a step failed: the caller's checks report it). Returns the number of steps run.
uint32_t run_workload(mp_engine& engine) {
  uint32_t s = 0;
  while (true) {
    ++s;
    if (s <= arrival_steps) engine.add(s);
    const auto ok = engine.step();
    EXPECT_TRUE(ok);
    if (!ok || (s >= min_steps && engine.idle())) return s;
    if (s >= min_steps + drain_steps) return s;
  }
}

TEST(MultiProcessEngineTest, FourWorkerProcessesRunThreeHundredStepsByteExact) {
  const std::string instance = "mp" + std::to_string(::getpid());
  ASSERT_TRUE(segments_of(instance).empty());

  kvc::testing::recording_manager* ledger = nullptr;
  embed::scheduler_connector_config cfg;
  cfg.listen = true;
  cfg.token = token;
  cfg.topology = {tp_size, pp_size, 0};
  cfg.pool = {.instance = instance, .slots_per_rank = cpu_slots, .slot_bytes = slot_bytes};
  cfg.planner.gpu_block_size = gpu_block_size;
  cfg.planner.offloaded_block_size = gpu_block_size * block_factor;
  cfg.planner.hash_block_size = gpu_block_size;
  cfg.make_manager = [&ledger](const scheduler::manager_config& m)
      -> result<std::unique_ptr<scheduler::offload_manager>> {
    auto inner = scheduler::offload_manager::create(m);
    if (!inner) return inner.error();
    auto rec = std::make_unique<kvc::testing::recording_manager>(std::move(inner).value());
    ledger = rec.get();
    return std::unique_ptr<scheduler::offload_manager>(std::move(rec));
  };
  auto sc = embed::scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_NE((*sc)->port(), 0);
  ASSERT_EQ(segments_of(instance).size(), 1u);

  std::vector<child_process> workers;
  for (rank_id r = 0; r < world_size; ++r) {
    auto c = child_process::start({KVC_MP_WORKER_EXE, "--port", std::to_string((*sc)->port()),
                                   "--rank", std::to_string(r), "--instance", instance});
    ASSERT_TRUE(c.ok()) << c.error().to_string();
    workers.push_back(std::move(c).value());
  }
  ASSERT_NO_FATAL_FAILURE(expect_registered(workers));
  ASSERT_TRUE((*sc)->wait_for_workers(30s).ok());

  mp_engine engine{**sc, workers};
  const uint32_t steps = run_workload(engine);
  ASSERT_TRUE(engine.idle()) << "not drained after " << steps << " steps";
  EXPECT_EQ(engine.free_gpu_blocks(), num_gpu_blocks - 1);

  const scheduler::connector_stats st = (*sc)->stats();
  expect_clean_run(st, engine);
  EXPECT_GT(engine.removed_keys(), 0u) << "the workload should make the CPU pool evict";
  EXPECT_GT(engine.gpu_hit_tokens(), 0u);

  // Every slot is idle or free: a store of as many fresh keys as the pool has slots fits.
  ASSERT_NE(ledger, nullptr);
  std::vector<block_key> fresh;
  for (uint32_t i = 0; i < cpu_slots; ++i) fresh.push_back(block_key::from_index(7'000'000 + i));
  auto plan = ledger->prepare_store(fresh);
  ASSERT_TRUE(plan.has_value()) << "some CPU slots are still pinned or pending";
  EXPECT_EQ(plan->slots.size(), cpu_slots);

  // Shut down: the scheduler stops the workers' actors, the processes are told to quit.
  auto stopped = (*sc)->shutdown(30s);
  ASSERT_TRUE(stopped.ok()) << stopped.error().to_string();
  EXPECT_EQ(*stopped, world_size);
  const worker_totals t = quit_workers(workers);
  sc->reset();  // removes the pool's segment

  EXPECT_GT(t.verified, 0u);
  EXPECT_EQ(t.verified, engine.loaded_tokens() * num_layers * world_size);
  EXPECT_GT(t.stores_checked, 0u);
  EXPECT_EQ(t.loads_seen, st.loads_ok * world_size);
  expect_nothing_left(instance);
  const uint64_t verified = t.verified;
  const uint64_t stores_checked = t.stores_checked;

  std::cout << "[ stats    ] steps " << steps << ", tokens computed " << engine.tokens_computed()
            << ", GPU-hit tokens " << engine.gpu_hit_tokens() << ", loaded tokens "
            << engine.loaded_tokens() << ", store jobs " << st.stores_ok << ", load jobs "
            << st.loads_ok << ", stored keys " << engine.stored_keys() << ", evicted keys "
            << engine.removed_keys() << ", deferred lookups " << engine.deferred()
            << ", token x layer x rank checks " << verified << ", slot checks " << stores_checked
            << "\n";
}

}  // namespace
}  // namespace kvc::mp
