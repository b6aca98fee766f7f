#pragma once
/// sim_scheduler: the scheduler loop of the simulated engine, without I/O: continuous batching
/// under a token budget and a running limit, a GPU block pool with prefix caching, preemption
/// under memory pressure, asynchronous loads from the CPU pool, and the simulated clock. It
/// makes the scheduler-side connector calls an engine makes (through connector_calls: the
/// embedding API's scheduler_connector, or nothing when offloading is off) and says what the
/// model must compute (model_input, for every rank's model runner).
///
/// One step, as vLLM's V1 scheduler does it (the connector tests' engine_model runs this loop
/// over the facades and model runners, with no budget and no running limit):
///   schedule()  running requests first: each gets min(its remaining tokens, the budget left)
///               (one decode token, or the next chunk of a prefill) and the blocks for them;
///               when none are left the last running request is preempted (blocks freed,
///               recomputed later). Then, unless somebody was preempted, waiting requests in
///               arrival order while the budget and max_running allow: one whose load finished
///               is promoted; a new one gets its GPU prefix-cache hit, asks
///               get_num_new_matched_tokens (nullopt: next step), gets its blocks and calls
///               update_state_after_alloc; with CPU hits it waits for the load, otherwise it runs.
///   ...         the caller builds the connector metadata from input(), runs the model (the
///               model runners write model().writes, verify model().loads once loaded) and
///               gathers the step's connector output.
///   complete()  computed tokens count, full blocks enter the prefix cache, a request whose
///               tokens are all computed samples its next token (a pure function of its tokens);
///               finished requests call request_finished (their blocks are freed now, or at
///               finished_sending with delay_free); finished_recving promotes a loading request
///               (invalid_block_ids truncate what it got); the clock advances by the step's cost.
///
/// A GPU cache reset (lose_gpu_cache, between steps: a rank's process restarted and its GPU KV
/// is gone, so no GPU block holds KV on every rank): every running request is preempted as under
/// memory pressure (blocks freed, recomputed or loaded from the CPU pool when scheduled again;
/// the next step input names them as preempted, so the connector flushes their stores), every
/// cached block hash is forgotten, and a request still waiting on a load keeps its blocks until
/// finished_recving (as vLLM's WAITING_FOR_REMOTE_KVS requests do) and then recomputes every
/// token (none of its blocks holds KV on the restarted rank). Finished requests holding blocks
/// for their stores release them at finished_sending as before.
///
/// The clock: a step costs prefill_token_us per prefill token computed, decode_step_us when it
/// decodes, load_token_us per token a load brings in. TTFT is the simulated time from a turn's
/// arrival to the end of the step that sampled its first token; it is counted, with the output
/// tokens, only for the requests that finished (stats().finished): an aborted request is in
/// neither.
///
/// Not thread-safe: the engine's scheduler thread owns it.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/scheduler/planner.hpp"
#include "launch/engines/sim/finished_request.hpp"
#include "launch/engines/sim/gpu_block_pool.hpp"
#include "launch/engines/sim/workload_generator.hpp"
#include "proto/status.hpp"

namespace kvc::sim {

/// The scheduler-side connector calls of an engine (scheduler_connector's names).
class connector_calls {
 public:
  virtual ~connector_calls() = default;
  virtual scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                             uint32_t num_computed) = 0;
  virtual status update_state_after_alloc(const scheduler::request_view& req,
                                          std::span<const gpu_block> blocks,
                                          uint32_t num_external) = 0;
  /// delay_free: the blocks are freed when the id comes back in finished_sending.
  virtual bool request_finished(std::string_view id) = 0;
};

/// Offloading off: no hits, nothing delayed.
class no_connector final : public connector_calls {
 public:
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view&,
                                                     uint32_t) override {
    return {0u, false};
  }
  status update_state_after_alloc(const scheduler::request_view&, std::span<const gpu_block>,
                                  uint32_t) override {
    return status::success();
  }
  bool request_finished(std::string_view) override { return false; }
};

struct engine_limits {
  uint32_t gpu_blocks = 256;  ///< per rank, including the null block 0
  uint32_t gpu_block_size = 16;
  uint32_t max_running = 64;
  uint32_t max_batched_tokens = 2048;
  double prefill_token_us = 50.0;
  double decode_step_us = 5000.0;
  double load_token_us = 2.0;
  /// vLLM's enable_prefix_caching: off, no GPU block is ever found by its hash.
  bool enable_prefix_caching = true;
};

/// Where a request is in its life (vLLM: WAITING, WAITING_FOR_REMOTE_KVS, RUNNING, and finished
/// with its blocks still held for a store in flight or a load that must end first).
enum class request_phase : uint8_t { waiting, loading, running, finished_holding };

/// A read-only look at one request (views into the scheduler, valid until its next call).
struct request_info {
  std::string_view id;
  request_phase phase = request_phase::waiting;
  std::span<const uint32_t> tokens;   ///< prompt, then outputs
  std::span<const gpu_block> blocks;  ///< held now
  uint32_t num_computed = 0;
};

/// Token p of a request lands in `slot` of GPU block `block`; its chained hash is `hash`.
struct token_write {
  gpu_block block = 0;
  uint32_t slot = 0;
  uint64_t hash = 0;
  friend bool operator==(const token_write&, const token_write&) = default;
};

/// A load planned this step: once the request's load finished on a rank, `blocks` must hold the
/// KV of the tokens whose hashes are `hashes` (gpu_block_size per block, in order).
struct load_check {
  std::string request_id;
  std::vector<gpu_block> blocks;
  std::vector<uint64_t> hashes;
  friend bool operator==(const load_check&, const load_check&) = default;
};

/// What the model computes in one step (vLLM broadcasts its SchedulerOutput to the workers;
/// this is the part the simulated model needs).
struct model_input {
  step_id step = 0;
  std::vector<token_write> writes;
  std::vector<load_check> loads;
  friend bool operator==(const model_input&, const model_input&) = default;
};

/// A turn that produced its last token (for the workload's follow-ups).
struct finished_turn {
  uint64_t conversation = 0;
  uint32_t turn = 0;
  std::vector<uint32_t> tokens;  ///< prompt, then outputs
};

struct engine_stats {
  uint64_t requests_arrived = 0;
  uint64_t requests_finished = 0;  ///< produced every output token
  uint64_t requests_aborted = 0;
  uint64_t preemptions = 0;
  uint64_t gpu_hit_tokens = 0;  ///< prompt tokens found in the GPU prefix cache at admission
  uint64_t cpu_hit_tokens = 0;  ///< tokens loaded from the CPU pool and used
  uint64_t cpu_hit_tokens_invalid = 0;  ///< loaded tokens dropped (failed loads: recomputed)
  /// Requests whose failed load or a GPU cache reset left computed tokens to recompute.
  uint64_t requests_recomputed = 0;
  uint64_t gpu_cache_resets = 0;  ///< lose_gpu_cache calls
  uint64_t prefill_tokens_computed = 0;
  uint64_t decode_tokens = 0;
  uint64_t output_tokens = 0;  ///< of the finished requests
  double clock_us = 0;         ///< simulated time
  std::vector<finished_request> finished;  ///< in the order they finished
};

class sim_scheduler {
 public:
  /// `connector` must outlive this object.
  sim_scheduler(const engine_limits& limits, connector_calls& connector);
  ~sim_scheduler();
  sim_scheduler(const sim_scheduler&) = delete;
  sim_scheduler& operator=(const sim_scheduler&) = delete;

  /// A request arrives now (it waits behind the earlier ones). errc::invalid_argument, nothing
  /// added, for an empty prompt, no output, an id in use, or one that can never fit the blocks.
  status add(request_spec spec);
  /// Plans the next step (see above); input() and model() describe it until complete().
  void schedule();
  /// The step's SchedulerOutput for build_connector_meta (views into this object).
  const scheduler::step_input& input() const noexcept { return input_; }
  const model_input& model() const noexcept { return model_; }
  /// Ends the step with its connector output. The turns that finished, for follow-ups.
  std::vector<finished_turn> complete(const scheduler::request_completions& c);
  /// Aborts every request (vLLM: finished with FINISHED_ABORTED): the run is draining.
  void abort_all();
  /// Aborts one request, between steps, in any phase: its blocks are freed now or when its
  /// store or load ends. errc::not_found for an id not held; errc::precondition_failed, nothing
  /// changed, between schedule() and complete().
  status abort(std::string_view id);
  /// vLLM's reset_prefix_cache: every cached block hash is forgotten (blocks held stay held).
  void reset_prefix_cache() { pool_.reset_prefix_cache(); }
  /// The GPU cache reset (see above), between steps. errc::precondition_failed, nothing
  /// changed, between schedule() and complete().
  status lose_gpu_cache();

  /// No request is left (every one released its blocks).
  bool idle() const noexcept { return requests_.empty(); }
  /// Requests not released yet (waiting, running, or finished with blocks held).
  size_t unfinished() const noexcept { return requests_.size(); }
  size_t running() const noexcept { return running_.size(); }
  step_id step() const noexcept { return step_; }
  const engine_stats& stats() const noexcept { return stats_; }
  const gpu_block_pool& pool() const noexcept { return pool_; }
  /// The request, while it is held (not released yet).
  std::optional<request_info> find(std::string_view id) const;
  /// The running requests, in their scheduling order.
  std::vector<request_info> running_requests() const;
  /// Protocol problems seen (a completion for an unknown request, a connector call that
  /// failed); each is a line. Empty in a good run.
  const std::vector<std::string>& errors() const noexcept { return errors_; }

 private:
  struct request;
  struct entry;

  scheduler::request_view view(const request& q) const;
  static request_info info(const request& q);
  void append_token(request& q, uint32_t token);
  void preempt(request& q);
  void finish(request& q);
  void abort(request& q);
  void release(request& q);
  /// Forgets the requests released since the last call (their blocks are free already).
  void erase_released();
  void cache_full_blocks(request& q);
  bool allocate(request& q, uint32_t tokens);
  void schedule_running();
  void schedule_waiting();
  void make_step_input();
  void apply(const scheduler::request_completions& c);

  engine_limits limits_;
  connector_calls& connector_;
  gpu_block_pool pool_;
  std::map<std::string, std::unique_ptr<request>, std::less<>> requests_;
  std::vector<request*> running_;
  std::deque<request*> waiting_;
  std::vector<entry> entries_;
  std::vector<std::string> preempted_;
  std::vector<std::string_view> preempted_views_;
  std::vector<scheduler::scheduled_request> new_requests_;
  std::vector<scheduler::scheduled_request> cached_requests_;
  scheduler::step_input input_;
  model_input model_;
  std::vector<std::string> released_;  ///< done this step: erased at its end
  uint32_t budget_ = 0;
  uint64_t step_prefill_ = 0;
  uint64_t step_loaded_ = 0;
  bool step_decodes_ = false;
  step_id step_ = 0;
  engine_stats stats_;
  std::vector<std::string> errors_;
  bool in_step_ = false;  ///< between schedule() and complete()
};

}  // namespace kvc::sim
