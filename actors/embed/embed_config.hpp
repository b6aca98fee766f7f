#pragma once
/// Configuration of the embedding facades (scheduler_connector, worker_connector): where the
/// actors run, the deployment's topology and shared secret, the node's CPU pool (one shm
/// segment), the copy backend, and the scheduler side's planner. Plain data; the validate_*
/// functions check a config before anything is started. No CAF.
///
/// Every process of one deployment must be given the same token, topology, pool and block
/// sizes: a worker whose pool geometry differs from the segment the scheduler created is
/// refused at registration (errc::layout_mismatch), one with another token or topology with
/// errc::protocol_mismatch.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/scheduler/planner_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "actors/trace/trace_record.hpp"
#include "cuda/copy_engine.hpp"
#include "proto/defaults.hpp"
#include "proto/fault_plan.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "proto/topology.hpp"

namespace kvc::channel {
class server_transport;  // actors/channel/transport.hpp
}  // namespace kvc::channel

namespace kvc::worker {
class tier_io;
}  // namespace kvc::worker

namespace kvc::embed {

/// Where a worker_connector's scheduler lives: in_process registers with a
/// scheduler_connector of the same process (passed to create); connect registers with the
/// scheduler at network.host:network.port (a scheduler_connector of another process that
/// listens there).
enum class connection_mode : uint8_t { in_process = 0, connect = 1 };

/// The deployment's shape (proto/topology.hpp).
using topology_config = kvc::topology;

/// The node's CPU pool: one shm segment named "/kvc-<uid>-<instance>-node<node>", rank-major,
/// `slots_per_rank` slots of `slot_bytes` per rank (shm/pool_geometry.hpp). The scheduler side
/// creates it (and removes it when it ends); workers attach it. With create_or_attach, whichever
/// process of the node comes first creates it and removes it when it ends; the others attach it
/// after checking its geometry (vLLM builds its workers before its scheduler).
struct pool_config {
  std::string instance = defaults::instance;  ///< letters, digits, '-', '_', '.'
  uint32_t slots_per_rank = 0;       ///< CPU slots = offloaded blocks the pool holds
  uint64_t slot_bytes = 0;           ///< bytes of one offloaded block on one rank
  bool prefault = false;  ///< fault the pages in up front (creator: all; worker: its rank)
  bool create_or_attach = false;  ///< see above; off: the scheduler side must create it
};

/// The file tier behind the pool (docs/disk_tier.md; launch config offload.secondary_tiers).
/// The scheduler side and every rank of a deployment must be given the same: the scheduler
/// side keeps the tier's ledger (and adopts the blocks rank 0's directory holds at start), each
/// rank opens its own directory and runs the tier's jobs on it.
struct file_tier_config {
  std::string root_dir;
  uint64_t capacity_bytes = 0;  ///< what one rank's files may take
  uint32_t n_read_threads = 16;
  uint32_t n_write_threads = 16;
  uint32_t max_pending_cascades = 1024;
  bool direct_io = true;
  std::string io_engine = "auto";  ///< auto | io_uring | threads (disk::io_engine_named)
  uint32_t io_depth = 4;           ///< io_uring: block I/Os in flight per ring
  /// What the KV is besides its geometry and topology (the model, its dtype): part of the run
  /// digest, so a run with another never reads these files.
  std::string kv_description;
};

/// The run description naming the tier's directory (disk::file_store_options): the KV
/// description, the bytes of a slot, GPU blocks per offloaded block and the topology.
std::string tier_run_description(const file_tier_config& tier, const pool_config& pool,
                                 const topology_config& topo, uint32_t block_size_factor);

/// Network and actor-system settings (the CAF system preset, actors/control/system_config.hpp).
struct network_config {
  /// Scheduler: the address to listen on. Worker (connect): the scheduler's address.
  std::string host = defaults::host;
  /// Scheduler: 0 picks a free port (see scheduler_connector::port()). Worker: the scheduler's;
  /// 0: the port the scheduler side published in the node's segment (it listens on any port,
  /// the workers find it there, also when they were built before it).
  uint16_t port = 0;
  std::chrono::milliseconds heartbeat_interval{defaults::heartbeat_ms};
  std::chrono::milliseconds connection_timeout{defaults::connection_timeout_ms};
  size_t actor_threads = 2;  ///< CAF scheduler threads of an actor system the facade starts
};

/// Builds the CPU pool's ledger from the planner's manager config (tests wrap the real manager,
/// engines may bring their own policy). Unset: offload_manager::create.
using manager_factory = std::function<result<std::unique_ptr<scheduler::offload_manager>>(
    const scheduler::manager_config&)>;

/// How a step's messages travel between the scheduler side and the ranks (the step channel,
/// actors/channel/):
///   zmq:    ZeroMQ; tcp for worker processes (with `listen`), inproc for workers of this
///           process. The default.
///   memory: in-process queues: only workers of this process (needs listen = false); a frame
///           sent is there when the send returns, so tests and soaks driven from one thread
///           are deterministic.
enum class step_transport : uint8_t { zmq = 0, memory = 1 };

/// What the scheduler side exposes about itself (docs/observability.md). Everything is off by
/// default.
struct observe_config {
  /// Serve GET /metrics (Prometheus text) on network.host:metrics_port from a thread of its own.
  bool serve_metrics = false;
  /// 0: a free port (scheduler_connector::metrics_port() tells which).
  uint16_t metrics_port = 0;
  /// Publish the CPU tier's KV events (BlockStored / BlockRemoved / AllBlocksCleared) in vLLM's
  /// wire format on a ZeroMQ PUB socket bound here, e.g. "tcp://*:5557"; empty: off.
  std::string kv_events_endpoint;
  /// A ROUTER socket bound here serves missed batches by sequence number; empty: no replay.
  std::string kv_events_replay_endpoint;
  std::string kv_events_topic;      ///< first frame of every batch (vLLM's default: empty)
  size_t kv_events_buffer = 10000;  ///< batches kept for replay (vLLM's buffer_steps)
  /// Message traces (docs/observability.md): every message through the step channel and the
  /// control plane (and with `jobs` every copy job at the workers) goes to
  /// `<trace_dir>/<role>-<pid>-<tag>.jsonl`. A worker reads these two fields only.
  trace::trace_level trace = trace::trace_level::off;
  std::string trace_dir;  ///< required unless trace is off
  /// Record the run's inputs for `kvconnect replay-run` (docs/observability.md "Replay"): the
  /// scheduler writes `<record_dir>/scheduler-<pid>.kvcrec` (record_dir empty: trace_dir).
  /// Needs the built-in manager (no make_manager).
  bool record = false;
  std::string record_dir;
};

/// Wraps the scheduler's end of the step channel in a decorator (every frame of every rank
/// passes it once: fault injection, recording). Returns the transport to use; null is an error.
using transport_decorator = std::function<std::unique_ptr<channel::server_transport>(
    std::unique_ptr<channel::server_transport>)>;

struct scheduler_connector_config {
  step_transport transport = step_transport::zmq;
  /// Accept worker processes on network.host:network.port. Off: only workers of this process
  /// (worker_connector in_process) can register, and no port is opened.
  bool listen = true;
  network_config network;
  std::string token;  ///< shared secret every worker must present (1 to 64 bytes)
  topology_config topology;
  /// Nodes whose workers register with this scheduler (topology.node must then be 0): each
  /// node has its own segment of the pool's layout (scheduler::handshake_expectation).
  uint32_t nodes = 1;
  pool_config pool;
  /// Block sizes and the CPU pool's ledger. planner.manager.capacity 0 means pool.slots_per_rank;
  /// any other value must equal it.
  scheduler::planner_config planner;
  /// A job not completed this long after it was planned fails with errc::timeout; 0: no time
  /// deadline.
  std::chrono::milliseconds job_timeout{defaults::job_timeout_ms};
  /// A job not completed once this many later steps were planned fails with errc::timeout; 0:
  /// no step deadline.
  uint64_t job_timeout_steps = defaults::job_timeout_steps;
  /// Injected faults (docs/faults.md): the channel's apply to the ranks' step reports at the
  /// scheduler's end of the step channel; the other kinds are ignored here. Empty: none.
  fault_config faults;
  /// When the node's segment existed already (pool.create_or_attach: the workers were built
  /// first, as vLLM builds them), the first build_connector_meta waits this long for every rank
  /// to join: the engine thread routes a rank's hello on the step channel only inside its own
  /// calls, so a step sent before a rank's hello would reach that rank only after the step.
  std::chrono::milliseconds ready_timeout{30'000};
  manager_factory make_manager;
  observe_config observe;
  /// The file tier behind the pool; none: the pool is the only tier. Not with observe.record.
  std::optional<file_tier_config> file_tier;
  /// Unset: the transport as made. The decorator must include actors/channel/transport.hpp
  /// (an internal header: for kvconnect's own tools and tests).
  transport_decorator wrap_transport;
};

/// What the coordinator and the step channel's fault seam counted (docs/faults.md).
struct fault_stats {
  fault_counts injected{};        ///< channel faults fired at the scheduler's end, by kind
  uint64_t duplicates = 0;        ///< duplicate reports, ignored
  uint64_t late_reports = 0;      ///< reports after their job's deadline, dropped
  uint64_t timed_out = 0;         ///< jobs failed by a deadline
  uint64_t rejected_reports = 0;  ///< reports of unknown, stale or lost senders, dropped
  uint64_t dropped_frames = 0;    ///< frames the step channel refused (corrupt, misrouted)
  friend bool operator==(const fault_stats&, const fault_stats&) = default;
};

/// Builds a rank's copy engine (tests bring a deterministic one). Unset: cuda::make_copy_engine
/// from `backend` and `device`.
using copy_engine_factory = std::function<result<std::unique_ptr<cuda::copy_engine>>()>;

/// Wraps a rank's file tier I/O, given the real one (worker::file_tier_io over the rank's
/// disk::file_io): a test holds a block I/O until it says so, leveldb's EnvWrapper. The wrapper
/// may keep the real one inside and must forward what it does not hold.
using tier_io_wrapper =
    std::function<std::unique_ptr<worker::tier_io>(std::unique_ptr<worker::tier_io>)>;

struct worker_connector_config {
  connection_mode mode = connection_mode::connect;
  network_config network;  ///< connect: the scheduler's host and port
  std::string token;
  topology_config topology;
  pool_config pool;
  rank_id rank = 0;  ///< global rank = pp_rank * tp_size + tp_rank
  /// Bumped by the launcher each time this rank's process restarts.
  uint32_t incarnation = 0;
  /// copy engine: "sim" or "cuda" (unless make_copy_engine)
  std::string backend = defaults::backend;
  int device = 0;               ///< CUDA device ordinal
  /// GPU blocks per offloaded block (the scheduler's offloaded_block_size / gpu_block_size).
  uint32_t block_size_factor = 1;
  /// How long the scheduler may take to accept the registration.
  std::chrono::milliseconds register_timeout{defaults::register_timeout_ms};
  /// With network.port 0: how long the registration waits for a scheduler side to publish its
  /// port in the node's segment (errc::timeout then).
  std::chrono::milliseconds join_timeout{30'000};
  observe_config observe;
  copy_engine_factory make_copy_engine;
  /// Injected faults (docs/faults.md): the copy faults concerning this rank wrap its copy engine
  /// (cuda::faulty_copy_engine), its fail_io faults fail its file tier jobs
  /// (worker::tier_executor); the other kinds are ignored here. Empty: none.
  fault_config faults;
  /// The file tier behind the pool: this rank's files and I/O threads; the scheduler side's
  /// must be the same.
  std::optional<file_tier_config> file_tier;
  /// Tests: wraps the file tier's I/O (unset: none).
  tier_io_wrapper wrap_tier_io;
};

/// Checks a config before anything starts: a token; tp/pp >= 1 within the handshake's world
/// limit; the pool (instance characters, slots and slot bytes > 0, a geometry without
/// overflow). Scheduler: the planner's block sizes and manager config, capacity vs slots, the
/// memory transport only without listen. Worker: rank < world size, factor >= 1, a
/// backend name, positive timeouts. errc::invalid_argument naming the field otherwise.
status validate(const scheduler_connector_config& cfg);
status validate(const worker_connector_config& cfg);

/// The segment name both sides derive: "/kvc-<uid>-<instance>-node<node>" for this user.
std::string segment_name_for(const pool_config& pool, const topology_config& topo);

}  // namespace kvc::embed
