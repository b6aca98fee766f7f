#pragma once
/// model_runner: one rank's simulated model around the embedding API's worker_connector, in
/// vLLM's worker order. It owns the rank's KV cache (one tensor per layer of shape (gpu_blocks,
/// page_bytes), kv_content.hpp, in the rank's copy engine, registered with the connector) and
/// runs each step through embed::run_worker_step (vLLM's order; actors/embed/worker_step.hpp):
///   bind_connector_metadata(step) -> handle_preemptions -> start_load_kv -> the forward (writes
///   the KV of model_input.writes) -> wait_for_save -> [finish_transfers] -> get_finished(the
///   metadata's finished requests) -> get_block_ids_with_load_errors -> clear_connector_metadata
/// and then checks loads: a load planned in model_input.loads is verified byte for byte, on
/// this rank, once get_finished reports its request in finished_recving, except the blocks
/// reported with load errors (the engine recomputes those). check_tokens checks any token
/// sequence the same way (the connector tests check every running request each step), and
/// last_step() keeps what the step gave the engine (get_finished, the load errors).
///
/// A rank that joined mid-run (a restarted process) aligns each model input with the metadata
/// stream first (worker_connector::next_metadata_step): metadata of an earlier step is run
/// connector-only (every call above but the forward, so its report reaches the coordinator;
/// counted in steps_connector_only), and a model input whose metadata is of a later step was
/// planned before this rank registered: it is skipped (steps_skipped), not an error.
///
/// With `finish_transfers` every transfer of the step completes inside it (the manual copy
/// engine completes only when waited on; deterministic runs), otherwise transfers overlap later
/// steps as on a GPU.
///
/// Without a worker_connector (offloading off) a step is only the forward.
///
/// Ownership: borrows the copy engine and the worker_connector (which must outlive it); the KV
/// buffers belong to the copy engine. Not thread-safe: the rank's worker thread owns it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"
#include "launch/engines/sim/sim_scheduler.hpp"
#include "proto/status.hpp"

namespace kvc::sim {

struct runner_geometry {
  uint32_t layers = 1;      ///< layers on this rank
  uint64_t page_bytes = 0;  ///< one GPU block of one layer; a multiple of gpu_block_size
  uint32_t gpu_blocks = 0;  ///< including the null block 0
  uint32_t gpu_block_size = 16;
  bool finish_transfers = true;
  /// 1: each layer's tensor is (gpu_blocks, page_bytes). 2: it is (2, gpu_blocks, page_bytes
  /// / 2), FlashAttention's K and V planes (two regions per layer; the connector tests).
  uint32_t kv_planes = 1;
};

struct runner_stats {
  uint64_t steps = 0;
  uint64_t tokens_written = 0;
  uint64_t loads_verified = 0;        ///< GPU blocks checked after a load (every layer)
  uint64_t load_mismatches = 0;       ///< of those, blocks whose bytes differ
  uint64_t blocks_load_failed = 0;    ///< blocks of failed loads (not checked)
  uint64_t step_errors = 0;           ///< connector calls that failed
  uint64_t steps_connector_only = 0;  ///< metadata without its model input (joined mid-run)
  uint64_t steps_skipped = 0;         ///< model inputs planned before this rank registered
  double model_ns = 0;                ///< wall time in the forward and the checks
  double copy_ns = 0;  ///< wall time in finish_transfers (the copies; a GPU runs them as DMA)
  /// Wall time in the connector's calls: each step's time less its model_ns and copy_ns (each
  /// step's own goes to the step sink, model_runner::on_step_connector_ns).
  double connector_ns = 0;
  uint64_t tokens_checked = 0;          ///< token x layer x plane checks of check_tokens
  std::vector<std::string> mismatches;  ///< the first few, described
};

/// Takes one step's connector time (step, ns) as the step ends; kept by the caller, not the
/// runner, so that the runner's memory does not grow with the run.
using step_time_sink = std::function<void(step_id, uint64_t)>;

class model_runner {
 public:
  /// Allocates the KV cache in `engine` and registers it with `wc` (null: offloading off).
  /// errc::invalid_argument for a bad geometry.
  static result<model_runner> create(cuda::copy_engine& engine, embed::worker_connector* wc,
                                     rank_id rank, const runner_geometry& g);

  /// One step (after the connector-only steps of metadata that came before it, or none when
  /// its metadata's step is later). Connector errors are counted (stats().step_errors) and the
  /// first is returned; the step is always cleared, so the next one can run.
  status run_step(const model_input& in, std::chrono::nanoseconds bind_timeout);
  /// The last run_step's own step as embed::run_worker_step ended it: what get_finished and
  /// get_block_ids_with_load_errors gave, the first failed call. Not bound when the step was
  /// skipped, had no connector or bound nothing.
  const embed::worker_step_outcome& last_step() const noexcept { return last_step_; }
  /// What runs right after wait_for_save in place of finish_transfers (the connector tests
  /// complete only the submitted transfers there, so a step's stores wait for the next step).
  void set_after_save(std::function<status()> fn) { after_save_ = std::move(fn); }
  /// Byte-exact check of the KV of tokens [0, n) of `tokens` in `blocks` (gpu_block_size tokens
  /// each; tokens past the last block are not checked) on this rank: one line per block, layer
  /// and plane that differs, naming `request`.
  std::vector<std::string> check_tokens(std::string_view request, std::span<const uint32_t> tokens,
                                        uint32_t n, std::span<const gpu_block> blocks);

  const runner_stats& stats() const noexcept { return stats_; }
  /// Every step run with a connector gives its connector time to `sink` (the launch's connector
  /// share takes each step's slowest rank); unset: only the total (stats().connector_ns).
  void on_step_connector_ns(step_time_sink sink) { step_sink_ = std::move(sink); }
  rank_id rank() const noexcept { return rank_; }

 private:
  model_runner(cuda::copy_engine& engine, embed::worker_connector* wc, rank_id rank,
               const runner_geometry& g, std::vector<std::byte*> layers);
  /// One bound step of `step`; `in` null: connector-only (no forward, no load checks planned).
  status connector_step(step_id step, const model_input* in, std::chrono::nanoseconds bind_timeout);
  status forward(const model_input& in);
  void verify(const load_check& check, const std::vector<gpu_block>& failed);
  /// Why slots [0, hashes.size()) of block b in (layer, plane) do not hold those tokens' KV;
  /// empty when they do.
  std::string differs(uint32_t layer, uint32_t plane, gpu_block b,
                      std::span<const uint64_t> hashes);
  std::string where(std::string_view request, gpu_block b, uint32_t layer, uint32_t plane) const;
  std::byte* slot_ptr(uint32_t layer, uint32_t plane, gpu_block b, uint32_t slot) const;

  cuda::copy_engine* engine_;
  embed::worker_connector* wc_;
  rank_id rank_;
  runner_geometry g_;
  uint64_t token_bytes_;            ///< one token's KV in one plane of one layer
  uint64_t plane_bytes_;            ///< one plane of one layer's tensor
  std::vector<std::byte*> layers_;  ///< device memory of each layer's tensor
  std::unordered_map<std::string, load_check> loading_;  ///< by request id
  std::vector<std::byte> buf_;
  std::vector<std::byte> got_;
  runner_stats stats_;
  step_time_sink step_sink_;
  embed::worker_step_outcome last_step_;
  std::function<status()> after_save_;
};

}  // namespace kvc::sim
