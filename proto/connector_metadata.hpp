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
/// group_sizes and block_indices are vLLM's GPULoadStoreSpec fields, one entry per KV-cache
/// group (one group today): gpu_blocks is the groups' block ids concatenated, group_sizes[g] of
/// them for group g, and block_indices[g] is the position in the request's block table (of
/// group g) of that group's first block, so skip == block_indices[0] % factor.
///
/// The inspect overloads let CAF serialise these plain structs without proto/ depending on CAF.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "proto/block_key.hpp"
#include "proto/ids.hpp"

namespace kvc {

/// What a job moves. load: CPU pool -> GPU, store: GPU -> CPU pool. The file tier's jobs
/// (tier_job): cascade: pool slot -> file, promotion: file -> pool slot, check: whether a block's
/// file is still there (the file tier's asynchronous lookup).
enum class transfer_kind : uint8_t { load = 0, store = 1, cascade = 2, promotion = 3, check = 4 };

constexpr std::string_view to_string(transfer_kind k) noexcept {
  switch (k) {
    case transfer_kind::load:
      return "load";
    case transfer_kind::store:
      return "store";
    case transfer_kind::cascade:
      return "cascade";
    case transfer_kind::promotion:
      return "promotion";
    case transfer_kind::check:
      return "check";
  }
  return "unknown";
}

/// A job between the GPU and the pool (load, store).
constexpr bool is_gpu_transfer(transfer_kind k) noexcept {
  return k == transfer_kind::load || k == transfer_kind::store;
}
/// A job of the file tier (cascade, promotion, check).
constexpr bool is_tier_job(transfer_kind k) noexcept {
  return k == transfer_kind::cascade || k == transfer_kind::promotion || k == transfer_kind::check;
}

/// Most KV-cache groups a job can describe (full attention has one; hybrid models a few).
inline constexpr size_t max_kv_cache_groups = 4;

/// One value per KV-cache group (vLLM's group_sizes / block_indices), kept inline so that a job
/// costs no allocation for them. Holds up to max_kv_cache_groups values; a longer list (only
/// from a malformed message) reads as its first max_kv_cache_groups.
class per_group {
 public:
  per_group() = default;
  per_group(std::initializer_list<uint32_t> values) {
    for (uint32_t v : values) push_back(v);
  }

  size_t size() const noexcept { return std::min<size_t>(n_, max_kv_cache_groups); }
  bool empty() const noexcept { return n_ == 0; }
  const uint32_t* begin() const noexcept { return v_.data(); }
  const uint32_t* end() const noexcept { return v_.data() + size(); }
  uint32_t operator[](size_t i) const noexcept { return v_[i]; }
  /// False (nothing added) when it holds max_kv_cache_groups values already.
  bool push_back(uint32_t v) noexcept {
    if (n_ >= max_kv_cache_groups) return false;
    v_[n_++] = v;
    return true;
  }

  friend bool operator==(const per_group& a, const per_group& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

  template <class Inspector>
  friend typename Inspector::result_type inspect(Inspector& f, per_group& x) {
    return f(x.n_, x.v_[0], x.v_[1], x.v_[2], x.v_[3]);
  }

 private:
  static_assert(max_kv_cache_groups == 4, "inspect lists every value");
  uint32_t n_ = 0;
  std::array<uint32_t, max_kv_cache_groups> v_{};
};

struct transfer_job {
  job_id id = 0;
  std::string request_id;
  transfer_kind kind = transfer_kind::load;
  std::vector<cpu_slot> slots;
  std::vector<gpu_block> gpu_blocks;
  uint32_t skip = 0;
  per_group group_sizes;    ///< per KV-cache group: its share of gpu_blocks
  per_group block_indices;  ///< per KV-cache group: block-table index of its first block

  friend bool operator==(const transfer_job&, const transfer_job&) = default;
};

/// A job of the file tier, executed by every rank on its own files and its own region of each
/// pool slot (docs/disk_tier.md). keys[i] names the block (its file); slots[i] is its pool slot:
/// read by a cascade (written to the file), written by a promotion (read from the file, checked).
/// A check has keys and no slots: ok iff every block's file is present. Completed like a
/// transfer job: one result per job, ok iff every block on every rank succeeded.
struct tier_job {
  job_id id = 0;
  transfer_kind kind = transfer_kind::cascade;
  std::vector<cpu_slot> slots;
  std::vector<block_key> keys;

  friend bool operator==(const tier_job&, const tier_job&) = default;
};

struct connector_metadata {
  step_id step = 0;
  /// Loads to start this step (start_load_kv).
  std::vector<transfer_job> loads;
  /// Stores planned this step: workers queue them in wait_for_save and submit them at the start
  /// of the next step, so offloading starts after the step's sampling transfers.
  std::vector<transfer_job> stores;
  /// Jobs that must have finished before this step overwrites GPU blocks or reuses slots:
  /// workers submit deferred stores, then wait for these in handle_preemptions. Three kinds
  /// together: a reset's stale jobs, the `failed` jobs, the preempted requests' jobs.
  std::vector<job_id> flush;
  /// The jobs of `flush` that the coordinator failed since the previous step's metadata (a
  /// failure on one rank, or a deadline), each named once, in the order their results came. A
  /// rank withdraws a load of these it has not reported (transfer_executor); a stale or
  /// preempted request's job that did not fail is not here.
  std::vector<job_id> failed;
  /// The requests preempted in this step, in the engine's order, whether or not they have jobs
  /// (vLLM's reqs_to_flush); `flush` lists their jobs.
  std::vector<std::string> flush_requests;
  /// The requests the engine reported finished (request_finished) since the previous step's
  /// metadata (vLLM's SchedulerOutput.finished_req_ids): a worker that is not told them by its
  /// engine passes these to get_finished, so its per-request bookkeeping ends with the request.
  std::vector<std::string> finished_requests;
  /// The file tier's jobs planned this step (cascades, promotions, checks); empty without a
  /// tier. Workers start them at once, beside the step's transfers.
  std::vector<tier_job> tier_jobs;
  /// Blocks the file tier no longer holds (evicted for capacity, or dropped): each rank removes
  /// its file of each.
  std::vector<block_key> tier_removed;

  friend bool operator==(const connector_metadata&, const connector_metadata&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, transfer_job& x) {
  return f(x.id, x.request_id, x.kind, x.slots, x.gpu_blocks, x.skip, x.group_sizes,
           x.block_indices);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, block_key& x) {
  return f(x.hi, x.lo);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tier_job& x) {
  return f(x.id, x.kind, x.slots, x.keys);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, connector_metadata& x) {
  return f(x.step, x.loads, x.stores, x.flush, x.failed, x.flush_requests, x.finished_requests,
           x.tier_jobs, x.tier_removed);
}

}  // namespace kvc
