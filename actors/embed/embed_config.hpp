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
#include <string>

#include "actors/scheduler/connector_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

/// Where the actors a facade talks to live.
///   scheduler_connector: in_process hosts the scheduler + coordinator actors in the engine's
///     process (and, with `listen`, accepts worker processes on host:port). connect subscribes
///     to a separate `kvconnect scheduler` process at host:port (which created the pool and
///     accepts the workers); the planner stays in the engine's thread either way.
///   worker_connector: in_process registers with a scheduler_connector of the same process
///     (passed to create); connect registers with the scheduler at host:port.
enum class connection_mode : uint8_t { in_process = 0, connect = 1 };

struct topology_config {
  uint32_t tp_size = 1;
  uint32_t pp_size = 1;
  uint32_t node = 0;
  uint32_t world_size() const noexcept { return tp_size * pp_size; }
};

/// The node's CPU pool: one shm segment named "/kvc-<uid>-<instance>-node<node>", rank-major,
/// `slots_per_rank` slots of `slot_bytes` per rank (shm/pool_geometry.hpp). The scheduler side
/// creates it (and removes it when it ends); workers attach it.
struct pool_config {
  std::string instance = "default";  ///< letters, digits, '-', '_', '.'
  uint32_t slots_per_rank = 0;       ///< CPU slots = offloaded blocks the pool holds
  uint64_t slot_bytes = 0;           ///< bytes of one offloaded block on one rank
  bool prefault = false;  ///< fault the pages in up front (creator: all; worker: its rank)
};

/// Network and actor-system settings (the CAF runtime preset, actors/runtime/system_config.hpp).
struct network_config {
  /// Scheduler: the address to listen on. Worker (connect): the scheduler's address.
  std::string host = "127.0.0.1";
  /// Scheduler: 0 picks a free port (see scheduler_connector::port()). Worker: the scheduler's.
  uint16_t port = 0;
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds connection_timeout{1000};
  size_t actor_threads = 2;  ///< CAF scheduler threads of an actor system the facade starts
};

/// Builds the CPU pool's ledger from the planner's manager config (tests wrap the real manager,
/// engines may bring their own policy). Unset: offload_manager::create.
using manager_factory = std::function<result<std::unique_ptr<scheduler::offload_manager>>(
    const scheduler::manager_config&)>;

/// How each step's metadata and the ranks' reports travel (in_process; connect mode always uses
/// the scheduler process's CAF messages):
///   zmq: over ZeroMQ between the engine's threads (the coordinator runs on the engine's
///        scheduler thread; docs/architecture.md "Data plane"); registration, supervision and
///        stop stay on CAF. The default: a step costs about half the CPU.
///   caf: as CAF messages through the scheduler and coordinator actors.
enum class data_plane_kind : uint8_t { zmq = 0, caf = 1 };

struct scheduler_connector_config {
  connection_mode mode = connection_mode::in_process;
  data_plane_kind data_plane = data_plane_kind::zmq;
  /// in_process: accept worker processes on network.host:network.port. Off: only workers of
  /// this process (worker_connector in_process) can register, and no port is opened.
  bool listen = true;
  network_config network;
  std::string token;  ///< shared secret every worker must present
  topology_config topology;
  pool_config pool;
  /// Block sizes and the CPU pool's ledger. planner.manager.capacity 0 means pool.slots_per_rank;
  /// any other value must equal it.
  scheduler::connector_config planner;
  /// A job not completed this long after it was planned fails with errc::timeout; 0: never.
  std::chrono::milliseconds job_timeout{0};  ///< in_process (the process has its own flag)
  manager_factory make_manager;
  /// connect: how long the scheduler process may take to accept the engine.
  std::chrono::milliseconds register_timeout{5000};
};

struct worker_connector_config {
  connection_mode mode = connection_mode::connect;
  network_config network;  ///< connect: the scheduler's host and port
  std::string token;
  topology_config topology;
  pool_config pool;
  rank_id rank = 0;  ///< global rank = pp_rank * tp_size + tp_rank
  /// Bumped by the launcher each time this rank's process restarts.
  uint32_t incarnation = 0;
  std::string backend = "sim";  ///< copy engine: "sim" or "cuda"
  int device = 0;               ///< CUDA device ordinal
  /// GPU blocks per offloaded block (the scheduler's offloaded_block_size / gpu_block_size).
  uint32_t block_size_factor = 1;
  /// How long the scheduler may take to accept the registration.
  std::chrono::milliseconds register_timeout{5000};
};

/// Checks a config before anything starts: a token; tp/pp >= 1 within the handshake's world
/// limit; the pool (instance characters, slots and slot bytes > 0, a geometry without
/// overflow). Scheduler: a port and register_timeout > 0 in connect mode, the planner's block
/// sizes and manager config, capacity vs slots. Worker: rank < world size, factor >= 1, a
/// backend name, a port in connect mode. errc::invalid_argument naming the field otherwise.
status validate(const scheduler_connector_config& cfg);
status validate(const worker_connector_config& cfg);

/// The segment name both sides derive: "/kvc-<uid>-<instance>-node<node>" for this user.
std::string segment_name_for(const pool_config& pool, const topology_config& topo);

}  // namespace kvc::embed
