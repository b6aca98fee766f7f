#pragma once
/// transfer_executor: the worker side of the offloading connector for one rank (vLLM's
/// OffloadingConnectorWorker at R1, reference §6, with R2's per-job completion §5b). It turns
/// the jobs of each step's connector_metadata into copy_engine transfers between this rank's
/// GPU KV cache and this rank's region of the node's CPU pool, and reports every job's outcome
/// exactly once. It makes every decision of a rank's worker; worker_connector forwards the
/// engine's calls to it.
///
/// Per engine step, in this order (mirroring vLLM's KVConnector worker calls):
///   bind_connector_metadata(meta)
///   handle_preemptions()    submit the stores deferred from the previous step, then block
///                           until the metadata's `flush` jobs that this worker knows finished,
///                           so the preempted requests' GPU blocks may be overwritten
///   start_load_kv()         deferred stores first (if not submitted yet), then one transfer per
///                           load job of this step
///   ... the model's forward ...
///   wait_for_save()         queue this step's store jobs; they are submitted at the start of
///                           the next step, so offloading starts after the sampling transfers
///   get_finished(finished)  job results plus R1's request-level finished_sending/recving
///   get_block_ids_with_load_errors()
///   clear_connector_metadata()
///
/// Failures never crash (vLLM asserts, issue #39732): a job whose ops cannot be built (kv caches
/// not registered, slot or block ids out of range, count mismatch) or whose submit fails is a
/// failed job, reported by the next get_finished like any other. Every job id accepted by
/// bind_connector_metadata is reported exactly once, by exactly one get_finished call.
/// A failed load's GPU block ids are returned by the next get_block_ids_with_load_errors.
///
/// Withdrawn loads. A load can fail without failing here: on another rank, or at its deadline
/// when a rank's copy or report does not come in time. The scheduler then lists it in a later
/// step's `failed` (every failed job, once; `flush` lists it too), and a load of a request not
/// preempted in that step that this rank has not reported yet is *withdrawn*: handle_preemptions
/// waits for its copy as for any flushed job, and when it is reported (by that step's
/// get_finished, unless the wait failed) its GPU block ids go to get_block_ids_with_load_errors
/// whatever the copy's outcome, beside its request in finished_recving. vLLM reads failed loads
/// only from its workers (KVOutputAggregator: a request is done once every worker named it, with
/// the union of their load errors in the same output), so every rank that names the request
/// after the failure also names its blocks, and the engine recomputes them. A rank that reported
/// the load before it failed adds nothing: the request is named once per job. A load `flush`
/// names without `failed` (in flight at a reset, or a preempted request's) is only waited for:
/// its copy ends before the step reuses a slot, and it is reported with its own outcome (a
/// stale load's bytes are good: the reset empties the pool's index, not the slots it reads).
///
/// Request-level sets (R1 §6): a store job joins its request's set when it is queued; a finished
/// store leaves it, and an emptied set of a request that finished earlier ("waiting") gives
/// `finished_sending`. A finished load gives `finished_recving`. Then for each request in
/// `finished_req_ids`: non-empty set -> waiting; existing empty set -> finished_sending and the
/// set is dropped; no set -> nothing.
///
/// Ownership: the copy engine and the CPU pool region are borrowed and must outlive the worker
/// (the shm segment or a test's heap buffer owns the region; the engine owns the GPU memory).
/// Not thread-safe: one owner (the rank's worker thread) calls everything. It starts no threads;
/// it only blocks inside copy_engine::wait (handle_preemptions, wait_in_flight).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/copy_engine.hpp"
#include "cuda/kv_layout.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::worker {

/// This rank's region of the CPU pool: slot s at base + s * slot_stride, s < num_slots.
struct cpu_pool_region {
  std::byte* base = nullptr;
  uint64_t slot_stride = 0;
  uint32_t num_slots = 0;
};

struct executor_config {
  rank_id rank = 0;
  uint32_t block_size_factor = 1;  ///< GPU blocks per offloaded block, >= 1
  cpu_pool_region pool;
};

/// What one get_finished call reports.
struct worker_output {
  /// This rank's finished jobs since the last call, each exactly once (report_sequencer turns
  /// them into completion_events by adding rank, incarnation, seq and step). A failed job's
  /// detail is the engine's report detail (the cuda backend names the CUDA call and error, e.g.
  /// "cudaEventQuery returned cudaErrorIllegalAddress (700)"), the refused submit's message, or
  /// why the worker could not submit it.
  std::vector<rank_job_result> jobs;
  /// R1 request-level sets (see the file comment).
  std::vector<std::string> finished_sending;
  std::vector<std::string> finished_recving;
};

/// A job as the worker sees it right now.
enum class job_phase : uint8_t {
  unknown = 0,    ///< never bound, or already reported
  queued = 1,     ///< a store waiting for the next step's submit
  in_flight = 2,  ///< submitted, not finished yet
  finished = 3,   ///< finished (done or failed), not reported yet
  bound = 4,      ///< in the bound metadata; not submitted or queued yet
};

class transfer_executor {
 public:
  /// Checks the config (factor >= 1, a non-null region with num_slots >= 1 and slot_stride >= 1)
  /// and registers the region with the engine (the cuda backend pins it). errc::invalid_argument
  /// for a bad config; the engine's error when registration fails.
  static result<transfer_executor> create(const executor_config& cfg, cuda::copy_engine& engine);

  transfer_executor(transfer_executor&&) noexcept = default;
  transfer_executor& operator=(transfer_executor&&) = delete;
  transfer_executor(const transfer_executor&) = delete;
  transfer_executor& operator=(const transfer_executor&) = delete;

  /// Canonicalises the rank's GPU KV tensors (cuda::kv_layout). errc::layout_mismatch when one
  /// offloaded block (factor GPU blocks of every region) does not fit a CPU slot; the layout's
  /// own errors for malformed tensors; errc::precondition_failed when already registered.
  /// Nothing changes on error.
  status register_kv_caches(std::span<const cuda::kv_tensor_desc> tensors);
  /// The same from regions given directly (cross-layer tensors, tests).
  status register_kv_regions(std::vector<cuda::kv_region> regions, uint64_t num_gpu_blocks);

  /// Binds this step's metadata (copied). errc::precondition_failed when one is bound already;
  /// errc::invalid_argument when a job id repeats inside it or names a job this worker still
  /// knows (queued, in flight or not yet reported). Nothing changes on error. The loads in flight
  /// here that its `failed` names, but for those of its flushed requests, are withdrawn (see the
  /// file comment).
  status bind_connector_metadata(const connector_metadata& meta);
  /// Unbinds the metadata. Jobs of it that were never started (no start_load_kv for its loads,
  /// no wait_for_save for its stores) fail with errc::precondition_failed, so that every bound
  /// job is still reported once.
  void clear_connector_metadata();
  bool has_metadata() const noexcept { return meta_.has_value(); }

  /// Submits the deferred stores, then waits for the bound metadata's flush jobs that are in
  /// flight here (ids this worker never saw or already finished are skipped). Returns the
  /// engine's error if the wait fails (the jobs are still reported later);
  /// errc::precondition_failed without bound metadata.
  status handle_preemptions(const cuda::submit_options& opts = {});
  /// Submits the deferred stores (unless handle_preemptions did), then this step's loads.
  /// errc::precondition_failed without bound metadata or when called twice for one binding.
  status start_load_kv(const cuda::submit_options& opts = {});
  /// Queues this step's stores for the next step. errc::precondition_failed without bound
  /// metadata or when called twice for one binding.
  status wait_for_save();

  /// Collects finished transfers (never blocks) and computes the request-level sets.
  worker_output get_finished(std::span<const std::string> finished_req_ids);
  /// GPU block ids of the loads that failed or were withdrawn (see the file comment) and were
  /// reported since the last call (in job order).
  std::vector<gpu_block> get_block_ids_with_load_errors();

  /// Blocks until the transfers of `jobs` that are in flight here finished (ids never
  /// submitted here, or finished, are skipped; queued stores stay queued). A rank with a file
  /// tier calls it with the flush before it starts the step's tier jobs (a promotion may reuse
  /// the slots of a failed store still copying here). The engine's error if the wait fails.
  status wait_transfers(std::span<const job_id> jobs);
  /// Blocks until every submitted transfer finished (shutdown, deterministic tests). Queued
  /// stores stay queued. Returns the engine's error if the wait fails.
  status wait_in_flight();
  /// Submits the queued stores now, without metadata (shutdown: nothing more will be bound).
  void submit_deferred_stores(const cuda::submit_options& opts = {});

  // --- introspection ---
  job_phase phase(job_id id);
  size_t queued_stores() const noexcept { return deferred_.size(); }
  size_t transfers_in_flight() const noexcept { return in_flight_.size(); }
  /// Requests with store bookkeeping (a store queued, in flight, or finished and the request
  /// not yet reported finished): 0 at quiescence once every request was finished.
  size_t tracked_requests() const noexcept { return store_jobs_.size(); }
  /// Jobs bound and not reported yet.
  size_t jobs_known() const noexcept { return known_.size(); }
  /// Withdrawn loads not reported yet.
  size_t withdrawn_loads() const noexcept { return withdrawn_.size(); }
  /// Engine reports whose transfer id this worker never submitted (ignored).
  uint64_t foreign_reports() const noexcept { return foreign_reports_; }
  rank_id rank() const noexcept { return cfg_.rank; }
  const std::optional<cuda::kv_layout>& layout() const noexcept { return layout_; }

 private:
  struct job_entry {
    job_id id = 0;
    transfer_kind kind = transfer_kind::load;
    std::string request_id;
    std::vector<gpu_block> gpu_blocks;  ///< loads only: reported on failure
  };

  transfer_executor(const executor_config& cfg, cuda::copy_engine& engine);

  status adopt_layout(result<cuda::kv_layout> layout);
  /// Builds the ops of `job` and submits them; a failure becomes a finished, failed job.
  void submit_job(const transfer_job& job, const cuda::submit_options& opts);
  void fail_job(job_entry entry, errc error, std::string why);
  /// Marks the loads in flight that `meta` names failed, but for preempted requests', withdrawn.
  void withdraw_failed_loads(const connector_metadata& meta);
  void finish_job(const job_entry& entry, rank_job_result result, worker_output& out);
  void flush_deferred(const cuda::submit_options& opts);

  executor_config cfg_;
  cuda::copy_engine* engine_;
  std::optional<cuda::kv_layout> layout_;
  std::optional<connector_metadata> meta_;
  bool deferred_submitted_ = false;  ///< for the bound metadata
  bool loads_started_ = false;
  bool stores_queued_ = false;

  std::vector<transfer_job> deferred_;                          ///< queued stores, in order
  std::unordered_map<cuda::transfer_id, job_entry> in_flight_;  ///< submitted transfers
  std::unordered_map<job_id, cuda::transfer_id> transfer_of_;   ///< in-flight job -> transfer
  struct early_failure {
    job_entry entry;
    errc error = errc::ok;
    std::string why;
  };
  /// Jobs that failed before reaching the engine, in failure order.
  std::vector<early_failure> failed_early_;
  std::unordered_set<job_id> known_;  ///< bound and not yet reported

  /// R1 request bookkeeping.
  std::unordered_map<std::string, std::unordered_set<job_id>> store_jobs_;
  std::unordered_set<std::string> waiting_;
  std::vector<gpu_block> load_errors_;
  /// Loads in flight that `failed` withdrew: reported with their blocks as load errors.
  std::unordered_set<job_id> withdrawn_;
  uint64_t foreign_reports_ = 0;

  // scratch buffers reused across submits
  std::vector<int64_t> slot_ids_;
  std::vector<int64_t> block_ids_;
};

}  // namespace kvc::worker
