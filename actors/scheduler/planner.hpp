#pragma once
/// planner: the scheduler side of the offloading connector (vLLM's
/// OffloadingConnectorScheduler at R1, reference §5, with R2's per-job completion §5b). It turns
/// what the engine's scheduler decided into transfer jobs and keeps the CPU pool's ledger
/// (offload_manager) in step with the jobs' outcomes. It makes every decision; the scheduler
/// actor only forwards messages. Pure: no threads, no clock, no CAF.
///
/// Per step, in the engine's order:
///   1. get_num_new_matched_tokens(req, num_computed) for each waiting request it tries to
///      schedule (may be called repeatedly): touch(all keys), then the maximal prefix of hits.
///   2. update_state_after_alloc(req, blocks, num_external) after allocating its blocks: pins the
///      hit blocks (prepare_load) and records one load job for this step.
///   3. build_connector_meta(step) once: this step's loads, the stores of every scheduled
///      request's newly computed full offloaded blocks (prepare_store), and the jobs the workers
///      must flush before preempted requests' blocks are reused.
///   4. update_connector_output(out) with the aggregated job results (from this or any earlier
///      step); then take_request_completions() gives finished_sending / finished_recving /
///      invalid_block_ids for the engine.
///   5. request_finished(id) exactly once per request, before its blocks are freed.
///
/// Jobs. Every load and store is one job with an id from a single counter. A job's keys stay
/// pinned (load: ref > 0) or pending (store: ref -1) in the manager until its result arrives;
/// each job is completed exactly once (store ok -> complete_store(keys, true); store failed ->
/// complete_store(keys, false): slots freed, no stored event; load ok or failed ->
/// complete_load(keys), and a failed load's GPU blocks are reported as invalid). A preempted
/// request's jobs are *not* completed early (unlike R1): their ids go into the step's `flush`
/// list (and the request into `flush_requests`), so workers finish them before the blocks are
/// overwritten, and their results arrive as usual. Each completed store job gives its own
/// stored event (R1 gives one per request); the blocks are the same.
///
/// Failed jobs. A job fails as soon as one rank reports a failure, or at its deadline, while
/// another rank may still be copying into or out of its slots; completing it gives those slots
/// back (a store's or a promotion's are freed, a load's or a cascade's unpinned) and they may be
/// reused by the next step's jobs. So the id of every job that failed (not a stale one: the
/// reset's flush lists it) goes into the next metadata's `flush`, once, and each rank ends its
/// own I/O of it before that step writes a slot (docs/disk_tier.md, "Failed jobs").
///
/// Results come in two forms: job results (connector_output, what kvconnect's workers report
/// through the coordinator; the planner then derives the request-level outcomes,
/// take_request_completions), and request-level outcomes as vLLM's engine aggregates them from
/// its workers (request_output). What the latter decide is their role. Without kvconnect's
/// workers (a replay of vLLM's calls: completes_jobs) they complete the jobs as R1 does
/// (finished_sending every store job of the request, successfully; finished_recving its load
/// job). With them (releases_requests) a job's outcome is the coordinator's alone: vLLM's sets
/// name a request once every worker is done with it, whatever happened to its bytes (a store that
/// failed on one rank included), so they only let the engine free a finished request's blocks or
/// schedule a loaded one early, and each id reaches the engine once, by whichever form comes
/// first: a request named by vLLM's set is not reported again when its jobs complete, and one
/// already reported is dropped from vLLM's set. A load is the exception: vLLM names a request in
/// finished_recving only once every worker reported it, and every worker's failed copies reach
/// the same or an earlier output as invalid_block_ids (vLLM's KVOutputAggregator.aggregate), so
/// vLLM's word is the load's outcome. The load job in flight of a request its finished_recving
/// names is *settled*: completed at once, failed when one of its blocks was among the engine's
/// invalid_block_ids since it was planned (vLLM recomputes those; kvconnect does not report
/// them again), ok otherwise. The coordinator's result for a settled job, when it comes (every
/// rank's report, or its deadline when a report was lost), changes nothing: it is dropped.
/// Conversely, once a releases_requests output came (the engine names loads), a load the
/// coordinator completes before the engine's finished_recving named its request (it failed on a
/// rank while another was still copying, or at its deadline) is completed in the ledger and
/// flushed as any failed job, but neither its request nor its blocks reach
/// take_request_completions: vLLM reads a connector's invalid blocks before it calls
/// update_connector_output (Scheduler.update_from_output: _handle_invalid_blocks, then
/// _update_from_kv_xfer_finished), so blocks added there would be lost and the request run on
/// KV that never arrived. The workers report it instead: every rank that had not named the
/// request names it when the flush reaches it, with the load's blocks as load errors
/// (worker/transfer_executor.hpp, "Withdrawn loads"), so vLLM names it once with them. The
/// request *awaits the engine* until then; its id in the engine's finished_recving is passed on.
/// Without such outputs (an engine reading take_request_completions alone) the coordinator's
/// result reports the request and, failed, its blocks, as before.
///
/// Keys. A request's keys are block_hashes[hash_factor-1 :: hash_factor] (the last hash inside
/// each full offloaded block), extended incrementally from the request view the engine passes in;
/// the engine must only ever append to a request's block_hashes.
///
/// Store cursor (R1's next_stored_block_idx): each time a request is scheduled it is set to the
/// number of offloaded blocks computable now (min(num_computed + num_scheduled, num_tokens) /
/// offloaded_block_size), after the blocks from the cursor up to that number were offered to
/// prepare_store (when prepare_store answers nullopt it stays, and they are offered again next
/// step). After a preemption the recomputed prefix can be shorter than the cursor: the cursor
/// then moves back, and the blocks are offered again as they are recomputed (storing those
/// evicted meanwhile or refused by the reuse filter), as R1 does.
///
/// Request state lives from the first get_num_new_matched_tokens (or the first scheduling) until
/// request_finished, or later while the engine holds the blocks for it. delay_free follows R1: it
/// is true iff a store job was ever planned for the request (R1's `_reqs_being_stored` entry,
/// which a preemption flush empties but keeps), even when every store already completed; the id
/// then always comes back in finished_sending: when its last job completes or, with nothing in
/// flight, at the next update_connector_output (job results); an engine passing request_output
/// names it itself. With a load in flight (an abort while loading, §9 item 27) the id appears in
/// finished_recving when the load completes, and the engine must keep the blocks until then (the
/// engine core knows this from the request's WAITING_FOR_REMOTE_KVS status; load_in_flight()
/// answers it too).
///
/// Reset (vLLM main's OffloadingConnectorScheduler.reset_cache, between steps): the manager
/// forgets every block (offload_manager::reset) and every job in flight becomes *stale*: its
/// id is below the reset's threshold (the job counter then), the next metadata's `flush` lists
/// it so that the workers finish it before any later job can write a slot it uses, and its
/// result, when it comes, never reaches the manager (whose slots may hold other blocks by then).
/// Unlike vLLM main, which drops its job table and leaves the request-level sets to its workers,
/// a stale job keeps its entry until its result: that result still gives the request-level
/// outcome kvconnect derives from it (finished_recving, a failed load's invalid blocks,
/// finished_sending of a finished request's last job), so a request waiting for a load at the
/// reset gets its blocks (the flush completes the copy before its slots are reused) and runs,
/// and one holding its blocks for a store gets them freed. Running requests store again from
/// their first block (the cursor goes back to 0, as in vLLM main).
///
/// File tier (planner_config::file_tier, docs/disk_tier.md). A store job that completes ok
/// offers its blocks to the file_tier_ledger; those it accepts are pinned in the manager (a
/// read reference, prepare_load) and go out as one cascade job, unpinned when it ends, so the
/// bytes are on disk before the slot can be reused (while pinned, such a block counts as being
/// loaded for R1's delay rule). A lookup whose pool prefix ends before the request's last block
/// asks the ledger about the following keys: ask_again, or a key being promoted, makes the
/// answer nullopt; a run of tier hits gets pool slots (prepare_store, as a store) and becomes one
/// promotion job, the answer being nullopt until it ends: ok completes it like a store (the
/// blocks are then pool hits, loaded as usual), failed frees the slots and the ledger answers
/// miss (recomputed); prepare_store finding no room makes the hits a miss now. The ledger's
/// queued file checks go out as check jobs (ok: the file is there on every rank). Tier jobs
/// belong to no request (they move no GPU block, so a preemption does not flush them), get
/// ids from the same counter and complete through update_connector_output like transfers. The
/// planner never waits for the disk.
///
/// Reset with a file tier is refused (errc::precondition_failed, nothing changed): the tier's
/// files would outlive it.
///
/// Limitations: one KV-cache group (no HMA / hybrid models); a store that fails
/// is not retried for the same request (its cursor has moved on; a later request can store it);
/// a load must end on an offloaded-block boundary (R1 would load a partial last block; the copy
/// layout moves whole offloaded blocks).
///
/// Not thread-safe: one actor owns it. Spans passed in are only read during the call.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "actors/scheduler/planner_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "proto/block_key.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"
#include "proto/kv_event.hpp"
#include "proto/status.hpp"

namespace kvc::scheduler {

/// What the connector needs to know about one request (vLLM's Request), borrowed for one call.
struct request_view {
  std::string_view id;
  /// Hashes of the request's full blocks at hash_block_size granularity, oldest first. Only
  /// ever grows between calls for the same request.
  std::span<const block_key> block_hashes;
  uint32_t num_tokens = 0;        ///< prompt + generated tokens so far
  bool do_remote_decode = false;  ///< P/D prefill instance: loaded blocks are stored again
};

/// get_num_new_matched_tokens' answer. tokens == nullopt: ask again next step (the hit blocks
/// are being loaded for another request); is_async is true iff tokens > 0 (loads are async).
struct match_result {
  std::optional<uint32_t> tokens;
  bool is_async = false;

  friend bool operator==(const match_result&, const match_result&) = default;
};

/// The request's block table after allocation (vLLM KVCacheBlocks, one KV-cache group),
/// borrowed for one call.
struct block_table_view {
  std::span<const gpu_block> ids;  ///< every GPU block id of the request, in order (0 = null)
  /// Per block: 1 iff the GPU prefix cache already holds it (vLLM: block.block_hash is not None).
  /// Empty: the blocks before num_computed / gpu_block_size are the hashed ones.
  std::span<const uint8_t> hashed;
};

/// One request scheduled in this step (vLLM NewRequestData / CachedRequestData entry).
struct scheduled_request {
  request_view req;
  /// New requests and resumed ones: all of the request's GPU block ids. Running requests:
  /// the block ids newly allocated in this step (appended to the known ones).
  std::span<const gpu_block> block_ids;
  uint32_t num_computed = 0;   ///< tokens computed before this step
  uint32_t num_scheduled = 0;  ///< tokens scheduled in this step
  bool resumed = false;        ///< cached requests only: resumed after preemption
};

/// The part of vLLM's SchedulerOutput that the connector reads.
struct step_input {
  step_id step = 0;
  std::span<const scheduled_request> new_requests;
  std::span<const scheduled_request> cached_requests;
  std::span<const std::string_view> preempted;  ///< requests preempted in this step
};

/// Request-level outcomes for the engine (vLLM KVConnectorOutput's request sets), accumulated
/// by update_connector_output and moved out by take_request_completions.
struct request_completions {
  /// Finished requests (delay_free) whose jobs have now all completed: free their blocks.
  std::vector<std::string> finished_sending;
  /// Requests whose load job completed, successfully or not.
  std::vector<std::string> finished_recving;
  /// GPU blocks that failed loads were meant to fill (the engine truncates those requests).
  std::vector<gpu_block> invalid_block_ids;

  bool empty() const noexcept {
    return finished_sending.empty() && finished_recving.empty() && invalid_block_ids.empty();
  }
  friend bool operator==(const request_completions&, const request_completions&) = default;
};

/// What the engine's request-level sets (request_output) decide.
enum class request_output_role : uint8_t {
  /// Nothing else reports the jobs (a replay of vLLM's calls without kvconnect's workers): the
  /// sets complete the named requests' jobs, stores successfully (R1).
  completes_jobs = 0,
  /// kvconnect's workers report every job to the coordinator, whose results (deduplicated,
  /// failed at their deadline, failed on any rank) alone decide each job's outcome in the
  /// ledger: the sets only release the request to the engine (finished_sending: its delay-freed
  /// GPU blocks may be freed; finished_recving: it may be scheduled), once.
  releases_requests = 1,
};

/// The request-level outcomes vLLM's engine passes (KVConnectorOutput's finished_sending /
/// finished_recving, aggregated over its workers), borrowed for one call.
struct request_output {
  /// Requests whose store jobs have all ended on every worker.
  std::span<const std::string_view> finished_sending;
  /// Requests whose load job has ended on every worker.
  std::span<const std::string_view> finished_recving;
  request_output_role role = request_output_role::completes_jobs;
  /// The GPU blocks the engine's workers failed to load (KVConnectorOutput.invalid_block_ids,
  /// the union over its workers). releases_requests: they settle the loads (see above).
  std::span<const gpu_block> invalid_block_ids = {};
};

/// Entries of each of the planner's per-request and per-job tables: every one is 0 at
/// quiescence (every request finished, every job completed, the outcomes taken), whatever the
/// number of steps before (flat memory; tests assert it).
struct planner_tables {
  size_t requests = 0;             ///< request ids with state
  size_t request_slots = 0;        ///< request states in use (the slot vector minus free ones)
  size_t jobs = 0;                 ///< jobs in flight
  size_t loads = 0;                ///< load jobs recorded or in flight
  size_t pending_loads = 0;        ///< recorded for the next metadata
  size_t owed_sending = 0;         ///< finished requests waiting to be reported
  size_t completions = 0;          ///< request outcomes not taken yet
  size_t finished_for_meta = 0;    ///< finished request ids for the next metadata
  size_t reset_flush = 0;          ///< stale job ids for the next metadata's flush
  size_t failed_flush = 0;         ///< failed job ids for the next metadata's flush
  size_t tier_jobs = 0;            ///< file tier jobs recorded or in flight
  size_t promoting = 0;            ///< blocks with a promotion in flight
  size_t settled = 0;  ///< loads settled by the engine's sets, the coordinator's result to come
  /// Loads the coordinator completed before the engine's sets named their request.
  size_t awaiting_engine = 0;
  friend bool operator==(const planner_tables&, const planner_tables&) = default;
};

/// A coordinator result that update_connector_output dropped because the engine's sets had
/// settled its load already: the job and the outcome the sets gave it.
struct settled_result {
  job_id job = 0;
  bool ok = false;  ///< the settled outcome, not the coordinator's
  friend bool operator==(const settled_result&, const settled_result&) = default;
};

/// Cumulative counters, cheap to read.
struct connector_stats {
  uint64_t lookups = 0;         ///< manager lookups issued by get_num_new_matched_tokens
  uint64_t hit_blocks = 0;      ///< offloaded blocks found (sum over answers with tokens > 0)
  uint64_t deferred = 0;        ///< answers "ask again" (hit blocks still being loaded)
  uint64_t loads_planned = 0;   ///< load jobs
  uint64_t load_blocks = 0;     ///< offloaded blocks in load jobs
  uint64_t stores_planned = 0;  ///< store jobs
  uint64_t store_blocks = 0;    ///< offloaded blocks in store jobs
  uint64_t store_retries = 0;   ///< prepare_store found no room; retried next step
  uint64_t loads_ok = 0;
  uint64_t loads_failed = 0;
  uint64_t stores_ok = 0;
  uint64_t stores_failed = 0;
  uint64_t rejected_results = 0;  ///< unknown / duplicate / mismatched job results
  uint64_t resets = 0;            ///< reset() calls that emptied the pool
  uint64_t stale_results = 0;     ///< results of jobs in flight at a reset (manager untouched)
  uint64_t loads_settled = 0;     ///< loads completed on the engine's sets (also ok / failed)
  uint64_t settled_results = 0;   ///< the coordinator's results of settled loads, dropped

  friend bool operator==(const connector_stats&, const connector_stats&) = default;
};

/// The file tier's counters: the ledger's (vLLM's tiering metrics) and the jobs the planner
/// made of its decisions.
struct file_tier_counters {
  file_tier_stats ledger;
  uint64_t cascade_jobs = 0;
  uint64_t promotion_jobs = 0;
  uint64_t check_jobs = 0;
  uint64_t promoted_blocks = 0;     ///< blocks in promotion jobs
  uint64_t cascaded_blocks = 0;     ///< blocks in cascade jobs
  uint64_t promotions_no_room = 0;  ///< tier hits the pool had no room for (answered as misses)
  uint64_t asked_again = 0;         ///< nullopt answers waiting for the tier (check, promotion)

  friend bool operator==(const file_tier_counters&, const file_tier_counters&) = default;
};

class planner {
 public:
  /// Validates the config (make_geometry) and builds the manager from cfg.manager.
  static result<std::unique_ptr<planner>> create(const planner_config& cfg);
  /// Same with a given manager (tests wrap the real one); cfg.manager is then not used.
  static result<std::unique_ptr<planner>> create(const planner_config& cfg,
                                                 std::unique_ptr<offload_manager> manager);

  planner(const planner&) = delete;
  planner& operator=(const planner&) = delete;
  ~planner();

  /// Tokens loadable from the CPU pool beyond the num_computed tokens the GPU prefix cache
  /// already has (reference §5): creates or reuses the request's state (a reused state forgets
  /// its GPU block ids, as on a resume), extends its keys, touches all of them, then - unless
  /// fewer than one offloaded block lies beyond num_computed - looks up the maximal prefix of
  /// hits from num_computed's block on. A hit block that another request is loading gives
  /// nullopt (with prefix caching on). Records num_computed as the request's local hit count.
  match_result get_num_new_matched_tokens(const request_view& req, uint32_t num_computed);

  /// After the engine allocated the request's blocks (`blocks`: all of them, GPU-cached prefix
  /// first) for num_computed + num_external tokens. num_external == 0: nothing happens.
  /// Otherwise pins the hit keys (prepare_load) and records one load job, emitted by the next
  /// build_connector_meta, filling the blocks from the first non-null block without a hash up to
  /// num_computed + num_external tokens (R1; when they are all hashed the job is empty, as in
  /// R1, and still completes the load); unless do_remote_decode, the loaded blocks are not stored
  /// again. Errors, nothing changed: unknown request (no get_num_new_matched_tokens), a load
  /// already in flight for it, num_external not covering whole offloaded blocks or beyond its
  /// keys, too few block ids, hashed flags not one per block, or the manager refusing the load.
  status update_state_after_alloc(const request_view& req, const block_table_view& blocks,
                                  uint32_t num_external);
  /// The same with the blocks before num_computed / gpu_block_size as the hashed ones.
  status update_state_after_alloc(const request_view& req, std::span<const gpu_block> block_ids,
                                  uint32_t num_external);

  /// This step's metadata: the recorded loads, then the stores of the scheduled requests (new
  /// ones first, then cached ones, in input order), in `flush` the stale jobs of a reset, the
  /// jobs that failed since the last metadata (in result order) and the in-flight job ids of the
  /// preempted requests, and in `flush_requests` the preempted requests themselves (all of them,
  /// in input order). Error, nothing changed, when a cached (non-new) request is unknown.
  result<connector_metadata> build_connector_meta(const step_input& in);

  /// Consumes aggregated job results and completes each job exactly once (a load of a request
  /// the engine has not named, once the engine names loads, awaits it: see above). Results for
  /// unknown or already completed job ids, or of the wrong kind, change nothing for that job;
  /// the others are still applied and the returned status names the rejected ids
  /// (errc::not_found or errc::invalid_argument) for the caller to log. Finished delay_free
  /// requests with nothing in flight are released and reported in finished_sending.
  status update_connector_output(const connector_output& out);

  /// Consumes vLLM-style request-level outcomes (finished_sending first, then finished_recving,
  /// in list order), by their role (see above). completes_jobs: finished_sending completes every
  /// store job of the request in flight (successfully, oldest first, one stored event each) and
  /// forgets that it ever stored; finished_recving completes its load job; every id, known or
  /// not, is passed on to take_request_completions as given (the engine's word). releases_requests:
  /// no store job completes; a finished delay_free request in finished_sending that has not
  /// been reported goes to take_request_completions' finished_sending (released now when
  /// nothing is in flight, else when its last job completes, without a second report); a
  /// request in finished_recving whose load is in flight goes to its finished_recving and the
  /// load is settled (see above: failed iff one of its blocks was in invalid_block_ids of this
  /// or an earlier call while it was in flight; no invalid block reported), and a request
  /// awaiting the engine (see above) goes to its finished_recving; every other id is dropped
  /// (reported already, or nothing to release). The first releases_requests output makes the
  /// engine's sets the only release of a loading request for the rest of the run.
  status update_connector_output(const request_output& out);
  /// The jobs the last update_connector_output(request_output) completed (role
  /// completes_jobs; empty for releases_requests), in the order it completed them: a
  /// coordinator that expected them stops waiting for their reports (step_core::forget_jobs).
  std::span<const job_id> jobs_completed_by_engine() const noexcept;

  /// The request-level outcomes gathered since the last call.
  request_completions take_request_completions();
  /// A load the engine's sets settled whose result from the coordinator has not come yet.
  bool settled(job_id job) const;
  /// The results of settled loads that the last update_connector_output(connector_output)
  /// dropped, in the output's order, with the outcomes the engine's sets gave them (so the
  /// metrics count such a load as the engine saw it, once).
  std::span<const settled_result> settled_results_dropped() const noexcept;

  /// The request finished (or was aborted); call once, before its blocks are freed. Returns
  /// delay_free: true iff a store job was ever planned for it (R1, see above) - then the engine
  /// frees the blocks when the id shows up in finished_sending. Unknown ids: false.
  bool request_finished(std::string_view req_id);

  /// The manager's stored / removed events since the last call.
  std::vector<kv_event> take_events();
  /// take_events(), then take_tier_events() (the pool's events first, then the file tier's).
  std::vector<kv_event> take_all_events();

  /// Empties the CPU pool and makes every job in flight stale (see "Reset" above): their ids go
  /// into the next metadata's `flush`, their results complete the requests but not the
  /// manager, and every live request's store cursor goes back to 0. The manager's events
  /// recorded before stay to be taken (the reset adds none). Between steps only:
  /// errc::precondition_failed, nothing changed, while loads recorded by
  /// update_state_after_alloc wait for build_connector_meta (vLLM asserts the same).
  status reset();

  // --- the file tier (planner_config::file_tier; without one these change nothing) ---
  bool has_file_tier() const noexcept;
  /// Blocks found in the tier's files at start (a restart), oldest first (ledger's adopt).
  void adopt_tier_blocks(std::span<const block_key> oldest_first);
  /// The tier's stored / removed events (medium fs) since the last call; with
  /// manager.enable_events off they are dropped at each build_connector_meta.
  std::vector<kv_event> take_tier_events();
  /// All zero without a tier.
  file_tier_counters tier_counters() const;
  /// The tier's ledger, for read-only inspection; nullptr without a tier.
  const file_tier_ledger* tier() const noexcept;

  // --- introspection (engine, tests, bench) ---
  const connector_stats& stats() const noexcept;
  const connector_geometry& geometry() const noexcept;
  /// A load job of this request is recorded or in flight.
  bool load_in_flight(std::string_view req_id) const;
  /// Jobs handed out and not completed yet (loads and tier jobs recorded but not yet emitted
  /// included).
  size_t jobs_in_flight() const noexcept;
  /// Requests with state (running, or finished and still held: jobs in flight or
  /// finished_sending owed).
  size_t tracked_requests() const noexcept;
  /// Every per-request / per-job table's size.
  planner_tables tables() const noexcept;
  /// The loads recorded by update_state_after_alloc for the next build_connector_meta.
  std::span<const transfer_job> pending_loads() const noexcept;
  /// The offload keys of a job in flight, in slot order (empty for unknown ids); valid until
  /// the next non-const call.
  std::span<const block_key> job_keys(job_id id) const;
  /// The manager, for read-only inspection (lookups in tests would count in the reuse filter).
  const offload_manager& manager() const noexcept;

 private:
  class impl;  // the state and the logic; keeps the container headers out of this one
  explicit planner(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::scheduler
