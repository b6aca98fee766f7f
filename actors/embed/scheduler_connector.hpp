#pragma once
/// scheduler_connector: the scheduler side of the KV connector for an engine (the methods of
/// vLLM's KVConnectorBase_V1 with role SCHEDULER), called from the engine's scheduler thread.
///
/// The planner (scheduler::connector_scheduler: lookups, the CPU pool's ledger, transfer jobs)
/// runs in the caller's thread, so every call is synchronous and cheap. The network work is
/// asynchronous. With the ZeroMQ data plane (config data_plane zmq, the default) the engine
/// thread itself encodes each step's metadata once and sends it to every rank, and aggregates the
/// ranks' reports when it polls (engine_data_plane.hpp: the coordinator's rules, on this thread);
/// with the CAF one, build_connector_meta hands the metadata to the scheduler actor, which sends
/// it to every rank, and the coordinator actor sends each step's output to this connector's own
/// actor. Either way update_connector_output() takes what has arrived without waiting; the
/// overload with a step waits for that step's output (an engine whose model output is
/// synchronous with its workers, as vLLM's is).
///
/// Life cycle (in_process): create() validates the config, creates the node's shm pool, starts
/// an actor system hosting the scheduler and coordinator actors and, with `listen`, accepts
/// worker processes on host:port (port() tells which).
/// Life cycle (connect): create() reaches the `kvconnect scheduler` process at host:port (which
/// owns the pool, the coordinator and the workers), authenticates with the token, topology and
/// pool layout, and subscribes this connector's actor to its step outputs; steps are submitted
/// to it. port() is 0; shutdown() only unsubscribes (the process stops its workers itself).
/// wait_for_workers() returns once every rank of the topology registered. Destruction (or
/// shutdown()) stops the workers, ends the actors and removes the pool's segment (in_process).
///
/// Per engine step (see docs/embedding.md):
///   get_num_new_matched_tokens / update_state_after_alloc   for requests being scheduled
///   build_connector_meta(step_input)                        once; sends it to the workers
///   update_connector_output()                               finished_sending / recving, invalid
///   request_finished(id)                                    once per request
///   take_events()                                           stored / removed blocks
///
/// Not thread-safe: one engine thread calls everything. The public headers include no CAF.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/embed/embed_config.hpp"
#include "actors/scheduler/connector_scheduler.hpp"
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

class worker_connector;
struct local_endpoint;  // actors/embed/local_endpoint.hpp (internal)

class scheduler_connector {
 public:
  /// Validates the config (embed::validate), builds the planner, creates the pool's segment,
  /// starts the actors and, with cfg.listen, publishes the scheduler on host:port. Errors:
  /// the config's; errc::shm_error / capacity_exhausted for the segment (one of the same name
  /// with a live creator exists); errc::io_error when the port cannot be opened.
  /// connect: errc::io_error when the process cannot be reached (errc::timeout when nothing
  /// answers within register_timeout); its refusal otherwise
  /// (protocol_mismatch: wrong token or topology, layout_mismatch, not_ready: another engine is
  /// subscribed, timeout: no answer within register_timeout).
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

  /// Blocks until every rank has a registered worker. errc::timeout when `timeout` passed first;
  /// errc::io_error when the scheduler actor is gone. Start-up only, never inside a step.
  status wait_for_workers(std::chrono::milliseconds timeout);

  // --- KVConnectorBase_V1, scheduler side ---

  /// Tokens loadable from the CPU pool beyond the num_computed tokens the GPU prefix cache
  /// has; tokens == nullopt: ask again next step (connector_scheduler.hpp).
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed);
  /// After the engine allocated the request's blocks; records a load job for the next
  /// build_connector_meta when num_external > 0.
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> block_ids, uint32_t num_external);
  /// Plans the step and sends its metadata to every worker (asynchronously: the call never
  /// waits on the network). Steps must be numbered upwards. Returns the metadata (the engine
  /// may log or inspect it; the workers get their copy from the actors).
  result<connector_metadata> build_connector_meta(const scheduler::step_input& in);
  /// Applies every step output that has arrived, without waiting. An error when the scheduler
  /// actor is gone (errc::io_error); results the planner rejects are logged, not errors.
  result<connector_update> update_connector_output();
  /// Waits up to `timeout` until the output of step `step` has arrived, then applies everything
  /// that has. errc::timeout if it did not arrive in time (what did arrive stays queued for the
  /// next call); errc::io_error when the scheduler actor is gone.
  result<connector_update> update_connector_output(step_id step, std::chrono::nanoseconds timeout);
  /// The request finished or was aborted; call once, before its blocks are freed. Returns
  /// delay_free: the blocks are freed when the id comes back in finished_sending.
  bool request_finished(std::string_view req_id);
  /// Stored / removed block events since the last call (vLLM take_events).
  std::vector<kv_event> take_events();

  // --- introspection ---
  const scheduler::connector_stats& stats() const noexcept;
  /// Jobs planned and not completed (their keys are pinned or pending in the ledger).
  size_t jobs_in_flight() const noexcept;
  size_t tracked_requests() const noexcept;
  /// The planner, read-only (geometry, manager size).
  const scheduler::connector_scheduler& planner() const noexcept;

  /// Stops every registered worker (their facades see the scheduler gone), ends the actors,
  /// removes the segment. Returns the number of workers stopped, or errc::timeout when they
  /// did not all go within `timeout` (the actors are ended anyway).
  /// Idempotent: later calls return 0. connect: unsubscribes from the scheduler process and
  /// returns 0 (its workers keep running).
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
