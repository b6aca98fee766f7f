#pragma once
/// ConnectorMetadata: what the scheduler tells every worker for one engine step (vLLM's
/// OffloadingConnectorMetadata with per-job completion, reference §5b). One message per step,
/// whatever its size: jobs carry their slot and block lists as vectors.
///
/// Every job is executed by every rank on its own shard of the KV cache; CPU slot ids are the
/// same on every rank (rank-major pool, shm/). A job moves `slots.size()` offloaded blocks, each
/// `block_size_factor` GPU blocks; the first `skip` GPU sub-blocks of the first slot are not
/// moved (a load that starts mid offloaded block, or a store whose leading GPU blocks are null),
/// so gpu_blocks.size() == slots.size() * factor - skip.
///
/// The inspect overloads let CAF serialise these plain structs without proto/ depending on CAF.
#include <cstdint>
#include <string>
#include <vector>

#include "proto/ids.hpp"

namespace kvc {

enum class transfer_kind : uint8_t { load = 0, store = 1 };  ///< load: CPU→GPU, store: GPU→CPU

struct transfer_job {
  job_id id = 0;
  std::string request_id;
  transfer_kind kind = transfer_kind::load;
  std::vector<cpu_slot> slots;
  std::vector<gpu_block> gpu_blocks;
  uint32_t skip = 0;

  friend bool operator==(const transfer_job&, const transfer_job&) = default;
};

struct connector_metadata {
  step_id step = 0;
  /// Loads to start this step (start_load_kv).
  std::vector<transfer_job> loads;
  /// Stores planned this step: workers queue them in wait_for_save and submit them at the start
  /// of the next step, so offloading starts after the step's sampling transfers.
  std::vector<transfer_job> stores;
  /// Jobs that must have finished before this step overwrites GPU blocks (preempted requests):
  /// workers submit deferred stores, then wait for these in handle_preemptions.
  std::vector<job_id> flush;

  friend bool operator==(const connector_metadata&, const connector_metadata&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_job& x) {
  return f(x.id, x.request_id, x.kind, x.slots, x.gpu_blocks, x.skip);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, connector_metadata& x) {
  return f(x.step, x.loads, x.stores, x.flush);
}

}  // namespace kvc
