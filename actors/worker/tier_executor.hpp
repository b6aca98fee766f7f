#pragma once
/// tier_executor: one rank's side of the file tier (docs/disk_tier.md). It runs each step's
/// tier jobs (connector_metadata::tier_jobs) as file I/O on the rank's disk::file_io, between
/// the rank's own files and its region of the node's CPU pool, and reports every job's outcome
/// once, like a transfer's: a cascade writes each block's pool slot to its file, a promotion
/// reads each block's file (verified: header, size, checksum) into its pool slot, a check asks
/// whether each block's file is there. A job is ok iff every block of it is; the first failing
/// block's error and reason are the job's. The metadata's `tier_removed` files are removed
/// first (their outcomes are counted, they belong to no job).
///
/// Flush (docs/disk_tier.md, "Failed jobs"). A job that failed on another rank or at its
/// deadline gave its pool slots back while this rank's I/O of it may still run; the next
/// metadata's `flush` names it. start() first ends this rank's I/O of every flushed job it
/// still has: block I/Os not started are withdrawn (the job fails here, errc::precondition_failed,
/// "cancelled by the flush"), running ones are waited for. Only then do the step's removals and
/// jobs start, so none of them meets a late read into or write from a reused slot.
///
/// One key at a time on the write side: a cascade's write of a block whose removal is still in
/// flight here (same step or an earlier one) is held until that removal completes, then
/// submitted (by the take_finished or wait_all that sees the removal end), so a removal never
/// lands after the new file's rename. Nothing waits for it.
///
/// Injected faults (fail_io, docs/faults.md): a job the tier_fault_decider picks fails at once
/// with errc::injected_fault, none of its I/O done, as a job whose I/O failed is reported.
///
/// Nothing here waits for the disk except wait_all (a worker without a forward pass, tests) and
/// a flush (only when it names a job whose I/O is running here): start() submits and returns,
/// take_finished() collects what is done.
///
/// Ownership: the tier_io and the pool region are borrowed and must outlive it; the caller
/// keeps the pool slots of a job untouched until it is reported (the scheduler's ledger pins
/// them). Not thread-safe: the rank's worker thread calls everything (tier_io is thread-safe).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/worker/tier_io.hpp"
#include "actors/worker/tier_io_stats.hpp"
#include "actors/worker/transfer_executor.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/tier_fault_decider.hpp"

namespace kvc::worker {

class tier_executor {
 public:
  /// payload_bytes: this rank's bytes of one block (its slot's bytes), at most pool.slot_stride.
  /// faults: the rank's fail_io decisions (none: no injected faults).
  tier_executor(tier_io& io, cpu_pool_region pool, uint64_t payload_bytes,
                std::optional<tier_fault_decider> faults = std::nullopt);

  /// Ends the I/O of the jobs of `meta.flush` in flight here (see the file comment), then
  /// starts the removals of `meta.tier_removed`, then every job of `meta.tier_jobs`. A job
  /// whose id is in flight here already, or with a slot outside the region, fails at once
  /// (reported by the next take_finished). Returns at once unless a flushed job's I/O is
  /// running. `jobs_allowed` not ok (the rank could not make sure the flush's transfers ended,
  /// so a promotion might write a slot still in use): the flush and the removals run as usual
  /// and every job of `meta.tier_jobs` fails at once with its error, doing no I/O.
  void start(const connector_metadata& meta, const status& jobs_allowed = status::success());
  /// The jobs finished since the last call, each once; never blocks.
  std::vector<rank_job_result> take_finished();
  /// Blocks until every started job and removal finished (their results wait for
  /// take_finished).
  void wait_all();

  size_t jobs_in_flight() const noexcept { return jobs_.size(); }
  const tier_io_stats& stats() const noexcept { return stats_; }
  /// Jobs failed by an injected fail_io.
  uint64_t injected_failures() const noexcept { return faults_ ? faults_->fired() : 0; }

 private:
  using clock = std::chrono::steady_clock;
  struct job_state {
    transfer_kind kind = transfer_kind::cascade;
    uint32_t pending = 0;  ///< block I/Os not completed yet
    rank_job_result result;
    clock::time_point started;
  };
  struct ticket_of {
    job_id job = 0;
    bool removal = false;
    block_key key;  ///< a removal's block
  };
  /// A cascade's write waiting for a removal of its block.
  struct held_write {
    uint64_t ticket = 0;
    std::span<const char> payload;
  };

  /// The flush part of start().
  void flush(std::span<const job_id> ids);
  void start_job(const tier_job& j);
  /// Submits the writes held for `key` (its last removal in flight completed).
  void release_held(const block_key& key);
  /// Applies completions to their jobs; finished jobs go to finished_.
  void apply(std::vector<disk::io_completion> done);
  void fail_block(job_state& js, errc error, std::string why);
  void finish_if_done(job_id id);

  tier_io* io_;
  cpu_pool_region pool_;
  uint64_t payload_bytes_;
  std::optional<tier_fault_decider> faults_;
  uint64_t next_ticket_ = 0;
  std::unordered_map<uint64_t, ticket_of> tickets_;  ///< I/Os in flight
  std::unordered_map<job_id, job_state> jobs_;       ///< jobs in flight
  /// Removals in flight, by block; a block's cascade writes wait in held_ until none is left.
  std::unordered_map<block_key, uint32_t, block_key_hash> removing_;
  std::unordered_map<block_key, std::vector<held_write>, block_key_hash> held_;
  std::vector<rank_job_result> finished_;
  tier_io_stats stats_;
};

}  // namespace kvc::worker
