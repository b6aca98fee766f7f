#pragma once
/// worker_connector: the worker side of the KV connector for one rank of an engine (the methods
/// of vLLM's KVConnectorBase_V1 with role WORKER), called from the engine's worker thread.
///
/// It owns the rank's copy engine ("sim" or "cuda", chosen by the config), its mapping of the
/// node's shm pool, the pure transfer_executor that turns each step's jobs into transfers, the
/// rank's actor, which registers the rank with the scheduler (in this process or at host:port),
/// and the rank's end of the step channel (actors/channel/), on which this thread receives each
/// step's metadata and sends the rank's reports: a step crosses no thread of kvconnect's (the
/// set-up is in rank_host.hpp). No call waits on the network except bind_connector_metadata
/// when the metadata has not arrived yet.
///
/// Per engine step, in this order (vLLM's order; see docs/embedding.md):
///   bind_connector_metadata(step)   the metadata the scheduler planned for `step`
///   handle_preemptions()            before the step overwrites preempted requests' blocks
///   start_load_kv()                 at the start of the forward
///   ... the forward ...
///   wait_for_save()                 at the end of the forward (queues this step's stores)
///   get_finished(finished_ids)      finished_sending / finished_recving; reports the rank's
///                                   job results to the coordinator
///   get_block_ids_with_load_errors()
///   clear_connector_metadata()
/// embed::run_worker_step (worker_step.hpp) makes these calls, with the engine's forward as a
/// hook. Every step the scheduler planned must be bound and cleared, in order: the coordinator
/// releases a step's output once every rank reported that step.
///
/// Thread-safety: not thread-safe, with one exception: register_in_background's thread, which
/// the methods that need its outcome wait for first.
///
/// Ownership: the KV cache memory is the engine's (register_kv_caches borrows it; with the sim
/// backend it is host memory: from copy_engine().allocate_device, or the engine's own).
/// Destruction ends the actor and unmaps the pool; it removes the segment only when this rank
/// created it (pool.create_or_attach). One engine thread calls everything. The public headers
/// include no CAF.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actors/embed/embed_config.hpp"
#include "actors/worker/tier_io_stats.hpp"
#include "cuda/copy_engine.hpp"
#include "cuda/kv_layout.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

class scheduler_connector;

/// What one get_finished call reports.
struct finished_requests {
  /// R1 request-level sets (transfer_executor.hpp): requests whose stores all finished after the
  /// request did, and requests whose load finished.
  std::vector<std::string> finished_sending;
  std::vector<std::string> finished_recving;
  /// This rank's job results observed by this call (already on their way to the coordinator).
  std::vector<rank_job_result> jobs;
};

class worker_connector {
 public:
  /// Validates the config, makes the copy engine, attaches the pool's segment (refusing another
  /// geometry: errc::layout_mismatch; errc::not_found before the scheduler created it, unless
  /// pool.create_or_attach lets this rank create it), builds
  /// the connector worker over this rank's region, and registers with the scheduler: in_process
  /// with `local` (required then), connect at network.host:port. Waits for the scheduler's
  /// answer up to register_timeout: a refusal comes back as the scheduler's error
  /// (errc::protocol_mismatch, layout_mismatch, ...), no answer as errc::timeout, an
  /// unreachable scheduler as errc::io_error (errc::timeout when nothing answers at host:port
  /// within register_timeout: CAF's own connect has no limit, control/tcp_probe.hpp).
  static result<std::unique_ptr<worker_connector>> create(const worker_connector_config& cfg,
                                                          scheduler_connector* local = nullptr);
  /// create() up to the registration: everything that can fail on this machine (config, copy
  /// engine, device, the pool's segment) is done and the scheduler has heard nothing, so the
  /// engine can set up its KV cache (copy_engine(), register_kv_caches) first and a failure
  /// there does not use up the rank's incarnation. Steps need register_with_scheduler().
  static result<std::unique_ptr<worker_connector>> prepare(const worker_connector_config& cfg,
                                                           scheduler_connector* local = nullptr);
  /// The registration of create() (its waiting and errors). errc::precondition_failed when the
  /// rank is registered already. With network.port 0 it first waits (up to join_timeout) for a
  /// scheduler side to publish its port in the node's segment (errc::timeout naming the segment).
  status register_with_scheduler();
  /// register_with_scheduler() on a thread of its own; returns at once. For an engine that
  /// builds its workers before its scheduler (vLLM): its start-up is not held up, and the rank
  /// joins as soon as the scheduler side listens. The calls that need the registration
  /// (bind_connector_metadata, next_metadata_step, get_finished's report) wait for it to end;
  /// its error comes back from the first of them that returns a status, and every later one.
  /// errc::precondition_failed when the rank is registered or registering already.
  status register_in_background();

  worker_connector(const worker_connector&) = delete;
  worker_connector& operator=(const worker_connector&) = delete;
  ~worker_connector();

  /// The rank's copy engine: allocate_device / upload / download for the engine's KV cache.
  cuda::copy_engine& copy_engine() noexcept;

  // --- KVConnectorBase_V1, worker side ---

  /// Registers the rank's GPU KV tensors (raw device pointers, shapes, byte strides;
  /// cuda/kv_layout.hpp). errc::layout_mismatch when one offloaded block does not fit a slot.
  status register_kv_caches(std::span<const cuda::kv_tensor_desc> tensors);
  /// The same from regions (vLLM's register_cross_layers_kv_cache).
  status register_kv_regions(std::vector<cuda::kv_region> regions, uint64_t num_gpu_blocks);

  /// Binds the metadata of `step`, waiting up to `timeout` for it to arrive. errc::timeout when
  /// it did not; errc::io_error when the scheduler is gone; errc::invalid_argument when the next
  /// metadata is for another step (it stays queued); errc::precondition_failed while a step is
  /// bound. A metadata the connector refuses (a repeated job id) still binds the step, so it is
  /// reported, and its error is returned. With a file tier it starts the step's tier jobs, after
  /// ending this rank's I/O of the jobs its `flush` names (failed elsewhere: their slots may be
  /// reused now; docs/disk_tier.md, "Failed jobs"): their tier I/O not started is cancelled,
  /// running tier I/O and, when the step has tier jobs, transfers in flight are waited for (the
  /// copy engine's error if that wait fails, the step bound all the same).
  status bind_connector_metadata(step_id step, std::chrono::nanoseconds timeout);
  /// Binds whichever step's metadata comes next (a worker that does not drive the step
  /// numbers itself, like the standalone `kvconnect worker`). The step bound, or
  /// bind_connector_metadata's errors.
  result<step_id> bind_next_connector_metadata(std::chrono::nanoseconds timeout);
  /// The step of the next metadata to bind, waiting up to `timeout` for it to arrive; it stays
  /// queued. A worker that joined mid-run (a restarted rank) aligns with it: metadata of an
  /// earlier step than its model input is run connector-only, a later one means the model input
  /// was planned before this rank registered. bind_next_connector_metadata's errors.
  result<step_id> next_metadata_step(std::chrono::nanoseconds timeout);
  /// The bound metadata; nullptr between steps.
  const connector_metadata* metadata() const noexcept;
  /// Submits the stores deferred from the previous step, then waits for the bound metadata's
  /// flush jobs (preempted requests, failed jobs) to finish.
  status handle_preemptions(const cuda::submit_options& opts = {});
  /// Starts this step's loads (and the deferred stores, if handle_preemptions did not).
  status start_load_kv(const cuda::submit_options& opts = {});
  /// Queues this step's stores; they are submitted at the start of the next step.
  status wait_for_save();
  /// Submits the queued stores now and blocks until every transfer finished: for a worker
  /// with no forward pass to overlap them with (the standalone worker, tests). The engine's
  /// error if the wait fails.
  status finish_transfers(const cuda::submit_options& opts = {});
  /// Blocks until the file tier's jobs started on this rank (with each bound step) finished;
  /// their results go with the next get_finished. For a worker with no forward pass (the
  /// standalone worker, finish_transfers) and tests; an engine lets them run across steps.
  void finish_tier_jobs();
  /// Collects finished transfers without blocking; sends this rank's report of the bound step
  /// (the first call per step; later results go with the next step's report).
  finished_requests get_finished(std::span<const std::string> finished_req_ids);
  /// GPU blocks of the loads that failed, or that `failed` withdrew (failed elsewhere: on another
  /// rank or at its deadline, and not reported by this rank before; transfer_executor.hpp),
  /// reported since the last call.
  std::vector<gpu_block> get_block_ids_with_load_errors();
  /// Unbinds the step (its unstarted jobs fail); reports the step if get_finished did not.
  void clear_connector_metadata();

  // --- introspection ---
  rank_id rank() const noexcept;
  /// False once the scheduler is gone (stopped or lost): no more metadata will come.
  bool connected() const noexcept;
  /// The scheduler stopped this rank (a clean end, as opposed to losing the scheduler).
  bool stopped() const noexcept;
  /// ok while the rank's device can take work; errc::device_unavailable naming the cause once it
  /// cannot (a sticky CUDA error, an injected lose_device: copy_engine::health). Every later
  /// transfer fails, and only a new process gets a new CUDA context: check it after each step's
  /// get_finished (its report has gone out) and end the process so that the rank restarts
  /// (`kvconnect worker` exits with code 4; the launcher's on-failure restarts it).
  status device_health() const;
  /// This rank's bytes of CPU slot `s` in the pool; empty when out of range (checks, debugging).
  std::span<const std::byte> pool_slot(cpu_slot s) const noexcept;
  /// The registered KV layout; nullptr before register_kv_caches.
  const cuda::kv_layout* layout() const noexcept;
  size_t transfers_in_flight() const noexcept;
  /// Copy and file tier (fail_io) faults injected on this rank (config.faults), by kind.
  fault_counts injected_faults() const noexcept;
  size_t queued_stores() const noexcept;
  /// Jobs bound and not yet reported.
  size_t jobs_known() const noexcept;
  /// Requests with store bookkeeping on this rank (transfer_executor::tracked_requests).
  size_t tracked_requests() const noexcept;
  /// The file tier's jobs started on this rank and not reported yet (0 without a tier).
  size_t tier_jobs_in_flight() const noexcept;
  /// What this rank's file tier I/O counted (zero without a tier).
  worker::tier_io_stats tier_stats() const noexcept;

 private:
  struct impl;
  explicit worker_connector(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::embed
