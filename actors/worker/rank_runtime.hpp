#pragma once
/// rank_runtime: everything a standalone worker process executes transfers with, for one rank:
/// the copy engine (sim or cuda, chosen at run time), the attachment to the node's shm pool, a
/// synthetic KV cache in "GPU" memory, and the connector_worker over both. The worker actor owns
/// one in execute mode; an engine embedding kvconnect brings its own KV cache instead.
///
/// The synthetic KV cache is `layers` per-layer tensors of shape (gpu_blocks, page_bytes), every
/// byte written at start-up from kv_pattern(rank, layer, block, offset), so that another process
/// (the scheduler's smoke driver, a test) can check what a store put into the pool, and, by
/// storing a loaded block again, what a load brought back.
///
/// Ownership: owns the segment mapping (never removes the name: the creator does), the engine,
/// the device buffers (through the engine) and the connector_worker, destroyed in reverse order
/// (the worker before the engine, the engine before the mapping it registered). Not thread-safe:
/// one owner. No CAF.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/worker/connector_worker.hpp"
#include "cuda/copy_engine.hpp"
#include "cuda/engine_factory.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "shm/pool_geometry.hpp"
#include "shm/segment.hpp"

namespace kvc::worker {

/// Shape of the synthetic KV cache; one offloaded block is block_factor GPU blocks of every
/// layer, so a CPU slot must hold slot_bytes().
struct synthetic_kv_spec {
  uint32_t layers = 2;
  uint64_t page_bytes = 4096;  ///< bytes of one GPU block of one layer
  uint32_t gpu_blocks = 64;    ///< per layer; block 0 is vLLM's null block
  uint32_t block_factor = 1;   ///< GPU blocks per offloaded block

  uint64_t slot_bytes() const noexcept { return uint64_t{block_factor} * layers * page_bytes; }
};

/// layers, page_bytes, block_factor >= 1, gpu_blocks >= 2, sizes without overflow;
/// errc::invalid_argument naming the field otherwise.
status validate(const synthetic_kv_spec& kv);

/// Byte `offset` of GPU block `block` of `layer` on `rank`, as the synthetic cache holds it.
std::byte kv_pattern(rank_id rank, uint32_t layer, gpu_block block, uint64_t offset) noexcept;

struct rank_runtime_options {
  rank_id rank = 0;
  synthetic_kv_spec kv;
  cuda::engine_options engine;
  std::string segment;          ///< the node's shm segment
  shm::pool_geometry geometry;  ///< the geometry the segment must have
  bool prefault = true;         ///< fault the rank's region in before the first transfer
};

class rank_runtime {
 public:
  /// Makes the engine, attaches the segment (refusing another geometry: errc::layout_mismatch),
  /// prefaults the rank's region, builds and registers the synthetic KV cache.
  static result<std::unique_ptr<rank_runtime>> open(const rank_runtime_options& opts);
  /// The same over a caller-owned CPU region instead of a segment (tests); `region` must outlive
  /// the runtime.
  static result<std::unique_ptr<rank_runtime>> over_region(
      rank_id rank, const synthetic_kv_spec& kv, std::unique_ptr<cuda::copy_engine> engine,
      cpu_pool_region region);

  rank_runtime(const rank_runtime&) = delete;
  rank_runtime& operator=(const rank_runtime&) = delete;
  ~rank_runtime();

  connector_worker& worker() noexcept { return *worker_; }
  cuda::copy_engine& engine() noexcept { return *engine_; }
  const synthetic_kv_spec& kv() const noexcept { return kv_; }
  /// GPU block `block` of `layer`, read back (not ordered against transfers in flight).
  result<std::vector<std::byte>> read_gpu_page(uint32_t layer, gpu_block block);

 private:
  rank_runtime() = default;
  static result<std::unique_ptr<rank_runtime>> build(std::unique_ptr<rank_runtime> rt, rank_id rank,
                                                     cpu_pool_region region);

  // Declaration order = reverse destruction order (see the file comment).
  std::optional<shm::segment> segment_;
  std::unique_ptr<cuda::copy_engine> engine_;
  std::vector<cuda::device_buffer> layers_;
  std::optional<connector_worker> worker_;
  synthetic_kv_spec kv_;
};

}  // namespace kvc::worker
