#pragma once
/// Options of the role processes (`kvconnect scheduler`, `kvconnect worker`) and the flags they
/// share. Both sides derive the node's pool from the same flags (topology, --instance, --slots,
/// the KV cache shape), so the layout checksum a worker registers with equals the segment's only
/// when the two were started with the same configuration. Plain data, no CAF.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "actors/embed/embed_config.hpp"
#include "launch/synthetic_kv.hpp"
#include "proto/status.hpp"
#include "shm/pool_geometry.hpp"

namespace kvc::launch {

using topology_options = embed::topology_config;

struct pool_options {
  std::string instance = "default";  ///< names the segment: /kvc-<uid>-<instance>-node<node>
  uint32_t slots = 64;               ///< CPU slots per rank
  synthetic_kv_spec kv;              ///< the shape of one offloaded block
};

/// What both sides derive from topology + pool flags.
struct pool_plan {
  std::string segment;
  shm::pool_geometry geometry;
  uint64_t layout_checksum = 0;
};

/// Validates the options (sizes, KV shape, world size, the instance name's characters) and
/// derives the plan. errc::invalid_argument naming the flag otherwise.
result<pool_plan> derive_pool(const topology_options& topo, const pool_options& pool);

struct network_options {
  uint32_t heartbeat_ms = 100;
  uint32_t connection_timeout_ms = 1000;
  /// The facades' network settings for `host` and `port`.
  embed::network_config facade(const std::string& host, uint16_t port) const;
};

/// --trace DIR and --trace-level: observe.trace / observe.trace_dir of a role process.
struct trace_options {
  std::string dir;                 ///< empty: no trace
  std::string level = "messages";  ///< messages | jobs (with --trace)
  /// The facades' observe config: off without a directory.
  embed::observe_config observe() const;
};

struct scheduler_process_options {
  topology_options topology;
  pool_options pool;
  network_options network;
  std::string token;
  std::string host = "127.0.0.1";  ///< the address to listen on
  uint16_t port = 0;  ///< 0: any free port (printed in the "listening" line)
  bool prefault = false;
  uint32_t job_timeout_ms = 0;  ///< 0: jobs never time out at the coordinator
  /// > 0: once every rank registered, drive this many steps of store/load round trips, check the
  /// pool's bytes, then stop the workers and exit (0 when every job succeeded and every check
  /// passed). 0: serve until SIGINT/SIGTERM.
  uint32_t smoke_steps = 0;
  uint32_t ready_timeout_ms = 30000;  ///< smoke: how long to wait for every rank to register
  uint32_t step_timeout_ms = 10000;   ///< smoke: how long one step's results may take
  uint32_t stop_timeout_ms = 5000;    ///< how long stopping the workers may take
  trace_options trace;
};

struct worker_process_options {
  topology_options topology;
  pool_options pool;
  network_options network;
  std::string token;
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  uint32_t rank = 0;  ///< global rank; tp_rank = rank % tp_size, pp_rank = rank / tp_size
  uint32_t incarnation = 0;
  std::string backend = "sim";
  int device = 0;
  bool prefault = true;
  uint32_t register_timeout_ms = 5000;
  trace_options trace;
};

/// --tp-size, --pp-size, --node.
void add_topology_flags(CLI::App& cmd, topology_options& topo);
/// --instance, --slots, --kv-layers, --kv-page-bytes, --gpu-blocks, --block-factor.
void add_pool_flags(CLI::App& cmd, pool_options& pool);
/// --trace DIR, --trace-level messages|jobs.
void add_trace_flags(CLI::App& cmd, trace_options& trace);
/// --token (or $KVCONNECT_TOKEN), --heartbeat-ms, --connection-timeout-ms.
void add_network_flags(CLI::App& cmd, std::string& token, network_options& net);

/// The role processes (role_processes.cpp): command-line wrappers around the embedding API's
/// facades, the same code path an engine links. They print
/// machine-readable JSON lines on stdout and log to stderr. Exit codes: 0 clean; 1 failure;
/// worker only: 2 when its registration failed (refused, timed out, or the rank could not be
/// set up after acceptance).
int run_scheduler_process(const scheduler_process_options& opts);
int run_worker_process(const worker_process_options& opts);

}  // namespace kvc::launch
