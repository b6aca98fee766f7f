#pragma once
/// scheduler_connector: the scheduler side of the KV connector for an engine (the methods of
/// vLLM's KVConnectorBase_V1 with role SCHEDULER), called from the engine's scheduler thread.
///
/// The planner (scheduler::planner: lookups, the CPU pool's ledger, transfer jobs)
/// runs in the caller's thread, so every call is synchronous and cheap. The network work is
/// asynchronous: build_connector_meta encodes the step's metadata once and sends it to every
/// rank on the step channel (actors/channel/), and the coordinator actor, which runs blocking on
/// this same thread (coordinator/blocking_coordinator.hpp), aggregates the ranks' reports when
/// update_connector_output() takes what has arrived (without waiting; the overload with a step
/// waits for that step's output, as an engine whose model output is synchronous with its
/// workers, like vLLM's, does).
///
/// Life cycle: create() validates the config, creates the node's shm pool, starts the actor
/// system with the scheduler actor (registration, supervision) and, with `listen`, accepts
/// worker processes on host:port (port() tells which). wait_for_workers() returns once every
/// rank of the topology registered. Destruction (or shutdown()) stops the workers, ends the
/// actors and removes the pool's segment (scheduler_host.hpp holds all of that).
///
/// Per engine step (see docs/embedding.md):
///   get_num_new_matched_tokens / update_state_after_alloc   for requests being scheduled
///   build_connector_meta(step_input)                        once; sends it to the workers
///   update_connector_output()                               finished_sending / recving, invalid
///   request_finished(id)                                    once per request
///   take_events()                                           stored / removed blocks
///
/// What watches it (the trace, the run record, the metrics, the KV-event publisher, as observe.*
/// asks) are step observers (step_observer.hpp), called at its events; none changes an answer.
///
/// Not thread-safe: one engine thread calls everything. The public headers include no CAF.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/embed/embed_config.hpp"
#include "actors/scheduler/planner.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/kv_event.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

/// What update_connector_output() gathered (vLLM's KVConnectorOutput as the scheduler sees it).
struct connector_update {
  /// finished_sending (free the blocks of delay_free requests), finished_recving (loads done:
  /// the requests may run), invalid_block_ids (failed loads: recompute from there).
  scheduler::request_completions completions;
  /// The aggregated job results applied, in arrival order (metrics, tests).
  std::vector<job_result> jobs;
  /// The highest step whose output has been applied; 0 before the first.
  step_id through_step = 0;
};

/// Counts of rank membership changes since the scheduler started.
struct rank_changes {
  uint64_t losses = 0;    ///< a live rank lost (its process died or went silent)
  uint64_t restarts = 0;  ///< a rank registered again with a higher incarnation
};

/// A rank the coordinator holds lost, with the incarnation it was lost as.
struct lost_rank {
  rank_id rank = 0;
  uint32_t incarnation = 0;
};

class worker_connector;
struct local_endpoint;  // actors/embed/local_endpoint.hpp (internal)

class scheduler_connector {
 public:
  /// Validates the config (embed::validate), builds the planner, creates the pool's segment
  /// (or, with pool.create_or_attach, attaches the one a worker created first), starts the
  /// actors and, with cfg.listen, publishes the scheduler on host:port and that port in the
  /// segment. Errors: the config's; errc::shm_error / capacity_exhausted for the segment (one of
  /// the same name with a live creator exists, or another live scheduler side serves it: one
  /// whose process ended is taken over, shm::segment::publish_scheduler_port);
  /// errc::layout_mismatch for another geometry; errc::io_error when a port cannot be opened.
  static result<std::unique_ptr<scheduler_connector>> create(const scheduler_connector_config& cfg);

  scheduler_connector(const scheduler_connector&) = delete;
  scheduler_connector& operator=(const scheduler_connector&) = delete;
  /// shutdown() with a 5 s limit.
  ~scheduler_connector();

  /// The port worker processes connect to (0 without listen).
  uint16_t port() const noexcept;
  /// The pool's shm segment name.
  const std::string& segment_name() const noexcept;
  const scheduler_connector_config& config() const noexcept;

  /// Blocks until every rank has a registered worker connected to the step channel.
  /// errc::timeout when `timeout` passed first; errc::io_error when the scheduler actor is gone.
  /// Start-up only, never inside a step.
  status wait_for_workers(std::chrono::milliseconds timeout);

  // --- KVConnectorBase_V1, scheduler side ---

  /// Tokens loadable from the CPU pool beyond the num_computed tokens the GPU prefix cache
  /// has; tokens == nullopt: ask again next step (planner.hpp).
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed);
  /// After the engine allocated the request's blocks; records a load job for the next
  /// build_connector_meta when num_external > 0.
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> block_ids, uint32_t num_external);
  /// The same with vLLM's block table: every block id and, per block, whether the GPU prefix
  /// cache holds it (its hash is set); the load starts at the first block without one.
  status update_state_after_alloc(const scheduler::request_view& req,
                                  const scheduler::block_table_view& blocks,
                                  uint32_t num_external);
  /// Plans the step and sends its metadata to every worker (asynchronously: the call never
  /// waits on the network, except the first call when the segment existed before this side:
  /// then it waits up to ready_timeout for every rank to join, wait_for_workers' errors).
  /// Steps must be numbered upwards. Returns the metadata (the engine
  /// may log or inspect it; the workers get their copy on the step channel).
  result<connector_metadata> build_connector_meta(const scheduler::step_input& in);
  /// Applies every step output that has arrived, without waiting. An error when the scheduler
  /// actor is gone (errc::io_error); results the planner rejects are logged, not errors.
  result<connector_update> update_connector_output();
  /// Waits up to `timeout` until the output of step `step` has arrived, then applies everything
  /// that has. errc::timeout if it did not arrive in time (what did arrive stays queued for the
  /// next call); errc::io_error when the scheduler actor is gone. A `timeout` no shorter than
  /// job_timeout never ends in errc::timeout: the step's deadline (job_timeout after
  /// build_connector_meta) releases it first, even when a report was lost on the way.
  result<connector_update> update_connector_output(step_id step, std::chrono::nanoseconds timeout);
  /// Request-level outcomes as vLLM's engine aggregates them from its workers
  /// (KVConnectorOutput.finished_sending / finished_recving). What they decide is the planner's
  /// (scheduler::planner::update_connector_output, planner.hpp): once a worker has attached over
  /// the step channel (for the rest of the run) they only release the requests to the engine,
  /// each once, while every job's outcome stays the coordinator's (request_output_role::
  /// releases_requests); without one (a replay playing the workers' part) they complete the
  /// requests' jobs, stores successfully, as vLLM R1 does. Either way, the next
  /// update_connector_output's completions are the sets the engine acts on: they replace
  /// vLLM's, not add to them. `invalid_block_ids`: the same output's failed blocks (vLLM's
  /// KVConnectorOutput.invalid_block_ids); with workers attached, a load its finished_recving
  /// names is settled from them at once (planner.hpp), and the coordinator's later result for
  /// it is dropped.
  status apply_request_output(std::span<const std::string_view> finished_sending,
                              std::span<const std::string_view> finished_recving,
                              std::span<const gpu_block> invalid_block_ids = {});
  /// Job results that reach the engine outside the step channel (a replay of vLLM's calls that
  /// plays the workers' part, as `kvconnect replay --connector` does): applied to the planner as
  /// the coordinator's are (scheduler::planner::update_connector_output); their request-level
  /// outcomes come with the next update_connector_output. errc::precondition_failed while the
  /// run is recorded (a record replays the coordinator's results only); otherwise the
  /// planner's status (rejected ids are named, the others applied).
  status apply_job_results(const connector_output& out);
  /// The request finished or was aborted; call once, before its blocks are freed. Returns
  /// delay_free: the blocks are freed when the id comes back in finished_sending.
  bool request_finished(std::string_view req_id);
  /// Stored / removed block events since the last call (vLLM take_events): the CPU pool's,
  /// then the file tier's (medium STORAGE, docs/disk_tier.md). Empty when
  /// observe.kv_events_endpoint is set: the connector publishes them itself, each step.
  std::vector<kv_event> take_events();
  /// vLLM main's reset_cache, between steps (scheduler::planner::reset): empties the CPU pool;
  /// the jobs in flight are flushed by the workers with the next step and their results, which
  /// the coordinator still aggregates as usual, end their requests' waits without reaching the
  /// pool. With the KV-event publisher, the events recorded before go out first, then one
  /// AllBlocksCleared batch; without it the next take_events() still returns those earlier
  /// events (vLLM's own block pool announces the reset with AllBlocksCleared). Recorded for
  /// replay (observe.record). errc::precondition_failed mid-step (a load recorded for the next
  /// build_connector_meta), errc::io_error after shutdown; nothing changed then.
  status reset_cache();

  // --- observability (docs/observability.md) ---
  /// The scheduler side's metrics now, in Prometheus text (what GET /metrics serves).
  std::string metrics_text();
  /// The /metrics port (observe.serve_metrics), 0 when not serving.
  uint16_t metrics_port() const noexcept;
  /// The KV-event PUB / ROUTER sockets' bound addresses (real ports); empty when off.
  std::string kv_events_endpoint() const;
  std::string kv_events_replay_endpoint() const;

  // --- introspection ---
  const scheduler::connector_stats& stats() const noexcept;
  /// Duplicates, late reports, timeouts, refused frames and injected channel faults so far
  /// (kept after shutdown).
  fault_stats fault_statistics() const;
  /// Rank losses and restarts the coordinator has seen (an engine that checks work across
  /// steps sees here that a rank's process changed in between).
  rank_changes ranks_changed() const noexcept;
  /// The ranks the coordinator holds lost now (not registered again), each with the
  /// incarnation it was lost as; empty after shutdown. Call from the engine loop's thread.
  std::vector<lost_rank> lost_ranks() const;
  /// Jobs planned and not completed (their keys are pinned or pending in the ledger).
  size_t jobs_in_flight() const noexcept;
  size_t tracked_requests() const noexcept;
  /// Every per-request / per-job table on the scheduler's side: the planner's, the
  /// coordinator's aggregator's and the step channel's queues (flat-memory checks).
  struct table_sizes {
    scheduler::planner_tables planner;
    size_t coordinator_jobs = 0;         ///< aggregator: jobs with live state
    size_t coordinator_deadlines = 0;    ///< aggregator: pending deadlines / grace periods
    size_t coordinator_unstamped = 0;    ///< aggregator: jobs awaiting their grace period
    size_t coordinator_ready_steps = 0;  ///< aggregator: step outputs not handed out
    size_t coordinator_remembered = 0;   ///< aggregator: freed ids (bounded, never 0 after use)
    size_t channel_queued_steps = 0;     ///< steps queued for ranks without a hello
  };
  table_sizes tables() const;
  /// Rank `rank`'s bytes of CPU slot `s` in the pool; empty when out of range or shut down
  /// (checks, debugging: not ordered against transfers in flight).
  std::span<const std::byte> pool_slot(rank_id rank, cpu_slot s) const noexcept;
  /// The planner, read-only (geometry, manager size).
  const scheduler::planner& planner() const noexcept;

  /// Stops every registered worker (their facades see the scheduler gone), ends the actors,
  /// removes the segment, completes the trace file (observe.trace) and the run record
  /// (observe.record). Returns the number of workers stopped, or errc::timeout when they
  /// did not all go within `timeout` (the actors are ended anyway). Idempotent: later calls
  /// return 0.
  result<uint32_t> shutdown(std::chrono::milliseconds timeout);

 private:
  friend class worker_connector;  // in-process workers join this connector's actor system
  /// This connector's actor system and scheduler actor; an invalid handle after shutdown.
  local_endpoint endpoint() const;

  struct impl;
  explicit scheduler_connector(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::embed
