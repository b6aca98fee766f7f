#pragma once
/// worker_registration: what a worker says about itself when it registers with the scheduler
/// (the control plane's hello), and the version of the messages between the processes.
///
/// The inspect overload lets CAF serialise it without proto/ depending on CAF. Plain values.
#include <cstdint>
#include <string>

#include "proto/ids.hpp"

namespace kvc {

/// Version of the messages between scheduler, coordinator and workers (docs/protocol.md). Bump it
/// whenever a message or its meaning changes; peers of another version are refused.
/// 2: the registration reply carries the data-plane endpoint; the engine's connect-mode
///    messages (kvc_engine, kvc_submit, kvc_ready).
/// 3: a step's messages travel only on the step channel (no CAF metadata, reports, expect or
///    connect mode); workers are stopped with kvc_stop.
/// 4: connector_metadata carries flush_requests and finished_requests, and each job its
///    KV-cache groups' sizes and block indices (vLLM's GPULoadStoreSpec).
/// 5: every step-channel frame ends with a CRC-32.
/// 6: a completion event (and a job result) carries its failure's detail in words.
/// 7: connector_metadata carries the file tier's jobs (cascade, promotion, check: new
///    transfer kinds) and the blocks whose files to remove.
/// 8: connector_metadata's `flush` also names the jobs that failed since the previous step
///    (transfers and tier jobs), and a rank ends its I/O of a flushed tier job before the
///    step's removals and tier jobs start (docs/disk_tier.md, "Failed jobs").
/// 9: connector_metadata carries `failed`, the jobs of `flush` that failed since the previous
///    step: a rank withdraws only those loads (a reset's stale load ends with its bytes).
inline constexpr uint32_t protocol_version = 9;

struct worker_registration {
  uint32_t protocol_version = 0;
  rank_id rank = 0;  ///< global rank = pp_rank * tp_size + tp_rank
  uint32_t tp_size = 0;
  uint32_t pp_size = 0;
  uint32_t tp_rank = 0;
  uint32_t pp_rank = 0;
  uint32_t node = 0;
  /// Bumped by the launcher whenever the rank's process restarts; a restarted rank must register
  /// with a higher incarnation than the one it had.
  uint32_t incarnation = 0;
  /// The shm segment the worker attached and the checksum of the layout it expects there
  /// (shm::layout_checksum of the geometry derived from its own configuration).
  std::string segment;
  uint64_t layout_checksum = 0;
  /// Shared secret of the deployment.
  std::string token;
  /// The worker's process id, for logs only.
  int64_t pid = 0;

  friend bool operator==(const worker_registration&, const worker_registration&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, worker_registration& x) {
  return f(x.protocol_version, x.rank, x.tp_size, x.pp_size, x.tp_rank, x.pp_rank, x.node,
           x.incarnation, x.segment, x.layout_checksum, x.token, x.pid);
}

}  // namespace kvc
