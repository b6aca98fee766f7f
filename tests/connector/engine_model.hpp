#pragma once
/// engine_model: a small deterministic inference engine over the embedding facades, the way
/// vLLM's V1 engine core drives a KV connector. Test support for the end-to-end tests.
///
/// One scheduler_connector and world_size worker_connectors live in this process, on the memory
/// step channel (a frame sent is there when the send returns, so one thread drives everything
/// deterministically); each rank's copy engine is a manual one (under a faulty decorator when
/// the test gives the rank a fault plan): a transfer completes only when the harness or the test
/// advances it, or somebody waits for it. Job results are aggregated across ranks by the real
/// coordinator, and the planner applies what it releases. No job deadlines: the tests decide
/// when transfers complete.
///
/// Its scheduler is the simulated engine's (sim::sim_scheduler: prefix caching, preemption under
/// memory pressure, asynchronous loads, request_finished and delay_free), with no token budget
/// and no running limit, asking the scheduler_connector; each rank's model is the simulated
/// engine's sim::model_runner (the KV of a token is a function of its chained hash, the layer's
/// K or V plane and the rank), so the engine knows the exact bytes every GPU block must hold:
/// the runner checks every finished load, and verify() every running request.
///
/// Each rank's KV cache is the runner's, with K and V planes: one (2, num_blocks, page) tensor
/// per layer, FlashAttention's split, in memory of that rank's copy engine; the CPU pool is the
/// node's shm segment the scheduler_connector creates (and removes).
///
/// One step():
///   1. sim_scheduler::schedule (running requests first, preempting the last one when blocks
///      run out; then, unless somebody was preempted, waiting requests: get_num_new_matched_tokens,
///      update_state_after_alloc, a load to wait for or a prefill to run).
///   2. build_connector_meta; [before_workers hook]; every rank's model_runner::run_step
///      (embed::run_worker_step, vLLM's worker call order) with the forward writing the KV of
///      the scheduled tokens and, with wait_at_step_end, every submitted transfer completed
///      after wait_for_save; get_finished gets the metadata's finished requests (those that
///      finished or were aborted since the previous metadata).
///   3. update_connector_output(step): the coordinator's released output (job results, ok iff
///      every rank was ok) and the request completions go to sim_scheduler::complete (computed
///      tokens, sampling, request_finished, finished_sending / finished_recving, invalid blocks).
///   4. verify_each_step: every running request's computed tokens are checked on every rank,
///      and every load a runner found wrong is an error.
/// Any error from the connector or the scheduler becomes a line in step_report::errors.
///
/// Test support; not thread-safe: the test's thread calls everything.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "cuda/copy_engine.hpp"
#include "cuda/manual_copy_engine.hpp"
#include "launch/engines/sim/gpu_block_pool.hpp"
#include "launch/engines/sim/model_runner.hpp"
#include "launch/engines/sim/sim_scheduler.hpp"
#include "proto/fault_plan.hpp"
#include "tests/connector/recording_manager.hpp"

namespace kvc::testing {

struct engine_config {
  uint32_t gpu_block_size = 4;     ///< tokens per GPU block
  uint32_t block_size_factor = 3;  ///< GPU blocks per offloaded block
  uint32_t num_gpu_blocks = 32;    ///< per rank, including the null block 0
  uint32_t num_layers = 2;
  uint32_t head_dim = 4;  ///< 2-byte elements: a token's K (or V) is 2*head_dim bytes
  uint32_t world_size = 1;
  uint32_t cpu_slots = 16;  ///< offloaded blocks in the CPU pool (per rank)
  scheduler::eviction_policy policy = scheduler::eviction_policy::lru;
  bool enable_prefix_caching = true;
  /// Complete every submitted transfer after wait_for_save (before get_finished); off: only
  /// the test's advance() calls, the flushes' waits and idle steps complete them.
  bool wait_at_step_end = true;
  bool verify_each_step = true;
  /// The pool's shm instance name (required; tests use shm::testing's per-process prefix).
  std::string instance;
  /// Rank r's copy fault plan (a faulty decorator over its manual engine); empty: none.
  std::function<fault_plan(rank_id)> faults;
};

struct request_spec {
  std::string id;
  std::vector<uint32_t> prompt;
  uint32_t max_new_tokens = 1;
  bool do_remote_decode = false;
};

/// What happened in one step.
struct step_report {
  step_id step = 0;
  connector_metadata meta;
  std::vector<std::string> scheduled;  ///< requests computed this step
  std::vector<std::string> preempted;
  std::vector<std::string> finished;  ///< requests that produced their last token / aborted
  std::vector<embed::finished_requests> rank_outputs;  ///< each rank's get_finished
  std::vector<std::vector<gpu_block>> rank_load_errors;
  connector_output output;  ///< the coordinator's job results, as the planner applied them
  scheduler::request_completions completions;
  std::vector<std::string> errors;
};

enum class request_state : uint8_t {
  waiting = 0,
  waiting_for_remote_kvs = 1,
  running = 2,
  finished_holding = 3,  ///< finished, blocks held for in-flight stores or load (abort)
  done = 4,
};

struct model_stats {
  uint64_t tokens_computed = 0;     ///< tokens written by forwards
  uint64_t tokens_loaded = 0;       ///< tokens that promoted requests got from successful loads
  uint64_t tokens_invalidated = 0;  ///< loaded tokens dropped because their blocks failed
  uint64_t preemptions = 0;
  uint64_t verified_tokens = 0;  ///< token x layer x K/V x rank checks done by verify()
};

class engine_model {
 public:
  /// Builds the scheduler_connector (and the pool's segment), the ranks' worker_connectors
  /// (registered in process), their KV tensors and the scheduler; errors are returned (tests
  /// ASSERT on them).
  static result<std::unique_ptr<engine_model>> create(engine_config cfg);
  /// The scheduler side first (it stops the workers and removes the segment), then the workers.
  ~engine_model();

  void add_request(request_spec spec);
  /// Aborts a request in any state (vLLM: finished with FINISHED_ABORTED).
  void abort(const std::string& id);

  step_report step();
  /// Steps until idle() or max_steps; returns every report. Stops early on errors. After a
  /// step without progress (nothing scheduled, finished or completed) it completes every
  /// submitted transfer, like an engine with nothing to compute that blocks on them.
  std::vector<step_report> run_until_idle(uint32_t max_steps = 200);
  /// No request left, no block held, no job in flight anywhere.
  bool idle() const;

  /// Byte-exact check of every running request's computed tokens on every rank (each rank's
  /// model_runner::check_tokens); one line per mismatching (request, block, layer, K/V, rank).
  std::vector<std::string> verify();
  /// The same for any token sequence: the KV the model computes for `tokens` (positions
  /// [0, n)) against the GPU blocks `blocks`, on every rank.
  std::vector<std::string> verify_tokens(const std::vector<uint32_t>& tokens, uint32_t n,
                                         const std::vector<gpu_block>& blocks);

  // --- introspection and control for tests ---
  const engine_config& config() const noexcept { return cfg_; }
  embed::scheduler_connector& scheduler() noexcept { return *sc_; }
  recording_manager& manager() noexcept { return *manager_; }
  embed::worker_connector& worker(rank_id r) { return *ranks_.at(r).wc; }
  /// Rank r's manual copy engine (under its fault decorator, if any): advance() completes
  /// transfers in the order the test chooses.
  cuda::manual_copy_engine& engine(rank_id r) { return *ranks_.at(r).manual; }
  const sim::gpu_block_pool& pool() const noexcept { return sched_->pool(); }
  /// vLLM's reset_prefix_cache: the GPU prefix cache forgets every block hash.
  void reset_prefix_cache() { sched_->reset_prefix_cache(); }
  const model_stats& stats() const noexcept { return stats_; }
  /// Rank r's model runner's counts (loads_verified: the loaded blocks it checked).
  const sim::runner_stats& runner_stats(rank_id r) const { return ranks_.at(r).runner->stats(); }
  /// nullopt for an id never added; done once it released its blocks.
  std::optional<request_state> state_of(const std::string& id) const;
  /// All of the request's tokens so far (prompt + outputs); empty once done or unknown.
  std::vector<uint32_t> tokens_of(const std::string& id) const;
  std::vector<gpu_block> blocks_of(const std::string& id) const;
  uint32_t num_computed(const std::string& id) const;
  /// Offloaded-block keys of a token sequence (what the connector derives from block hashes).
  std::vector<block_key> keys_of(const std::vector<uint32_t>& tokens) const;
  /// Called in each step with the metadata just built, before any rank binds it.
  void set_before_workers(std::function<void(const connector_metadata&)> fn) {
    before_workers_ = std::move(fn);
  }
  void set_wait_at_step_end(bool on) noexcept { cfg_.wait_at_step_end = on; }
  /// Bytes of one token's K (or V) in one layer on one rank.
  uint32_t token_bytes() const noexcept { return 2 * cfg_.head_dim; }

 private:
  class connector_calls;
  struct rank_state {
    std::unique_ptr<embed::worker_connector> wc;
    cuda::manual_copy_engine* manual = nullptr;  ///< owned by wc's copy engine
    std::optional<sim::model_runner> runner;     ///< its KV tensors are in wc's copy engine
    uint64_t load_mismatches_seen = 0;           ///< runner->stats().load_mismatches reported
  };

  explicit engine_model(engine_config cfg);
  status init();
  status add_rank(rank_id r);
  /// The node's CPU pool: one slot holds an offloaded block's K and V of every layer.
  embed::pool_config cpu_pool() const;
  /// Every rank's model_runner::check_tokens, counted in stats().verified_tokens.
  std::vector<std::string> check_tokens(std::string_view request, std::span<const uint32_t> tokens,
                                        uint32_t n, std::span<const gpu_block> blocks);

  engine_config cfg_;
  recording_manager* manager_ = nullptr;  ///< owned by sc_'s planner
  std::unique_ptr<embed::scheduler_connector> sc_;
  std::vector<rank_state> ranks_;
  std::unique_ptr<connector_calls> calls_;
  std::unique_ptr<sim::sim_scheduler> sched_;

  std::set<std::string, std::less<>> added_;  ///< every id add_request took
  std::vector<std::string> add_errors_;       ///< refused add_request calls, for the next step
  std::vector<std::string> finished_prev_;    ///< finished in the previous step
  std::function<void(const connector_metadata&)> before_workers_;
  model_stats stats_;
};

}  // namespace kvc::testing
