#include "actors/embed/embed_config.hpp"

#include <unistd.h>

#include <string>

#include "actors/control/gate.hpp"
#include "actors/scheduler/handshake.hpp"
#include "shm/pool_geometry.hpp"
#include "shm/segment.hpp"

namespace kvc::embed {

namespace {

status invalid(std::string what) {
  return make_error(errc::invalid_argument, std::move(what));
}

status validate_common(const std::string& token, const topology_config& topo,
                       const pool_config& pool) {
  if (token.empty()) return invalid("embed: the token is empty");
  if (token.size() > control::max_token_bytes) {
    return invalid("embed: the token has more than " + std::to_string(control::max_token_bytes) +
                   " bytes");
  }
  if (auto st = validate(topo); !st) return invalid("embed: " + st.message());
  if (pool.instance.empty()) return invalid("embed: pool.instance is empty");
  for (char c : pool.instance) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return invalid("embed: pool.instance may only hold letters, digits, '-', '_', '.'");
  }
  if (pool.slots_per_rank == 0) return invalid("embed: pool.slots_per_rank must be >= 1");
  if (pool.slot_bytes == 0) return invalid("embed: pool.slot_bytes must be >= 1");
  const shm::pool_geometry g{topo.world_size(), pool.slots_per_rank, pool.slot_bytes};
  return shm::validate(g);
}

status validate_observe(const observe_config& o) {
  if (o.trace != trace::trace_level::off && o.trace_dir.empty()) {
    return invalid("embed: observe.trace is " + std::string{trace::to_string(o.trace)} +
                   " but observe.trace_dir is empty");
  }
  return {};
}

status validate_tier(const std::optional<file_tier_config>& tier) {
  if (!tier) return {};
  if (tier->root_dir.empty()) return invalid("embed: file_tier.root_dir is empty");
  if (tier->capacity_bytes == 0) return invalid("embed: file_tier.capacity_bytes must be > 0");
  if (tier->n_read_threads == 0 || tier->n_write_threads == 0) {
    return invalid("embed: file_tier.n_read_threads and n_write_threads must be >= 1");
  }
  if (tier->max_pending_cascades == 0) {
    return invalid("embed: file_tier.max_pending_cascades must be >= 1");
  }
  return {};
}

}  // namespace

std::string tier_run_description(const file_tier_config& tier, const pool_config& pool,
                                 const topology_config& topo, uint32_t block_size_factor) {
  return "kv=" + tier.kv_description + "\nslot_bytes=" + std::to_string(pool.slot_bytes) +
         "\nblock_size_factor=" + std::to_string(block_size_factor) +
         "\ntp=" + std::to_string(topo.tp_size) + "\npp=" + std::to_string(topo.pp_size) + "\n";
}

std::string segment_name_for(const pool_config& pool, const topology_config& topo) {
  return shm::segment_name(::getuid(), pool.instance, topo.node);
}

status validate(const scheduler_connector_config& cfg) {
  if (auto st = validate_common(cfg.token, cfg.topology, cfg.pool); !st) return st;
  if (auto st = validate_observe(cfg.observe); !st) return st;
  if (cfg.observe.record && cfg.observe.record_dir.empty() && cfg.observe.trace_dir.empty()) {
    return invalid("embed: observe.record needs observe.record_dir (or observe.trace_dir)");
  }
  if (cfg.observe.record && cfg.make_manager) {
    return invalid("embed: observe.record needs the built-in manager (make_manager is set): a "
                   "replay rebuilds the planner from the recorded config");
  }
  if (auto st = validate_tier(cfg.file_tier); !st) return st;
  if (cfg.file_tier && cfg.observe.record) {
    return invalid("embed: observe.record does not record the file tier: a replay could not "
                   "rebuild it");
  }
  if (auto g = scheduler::make_geometry(cfg.planner); !g) return g.error();
  scheduler::manager_config m = cfg.planner.manager;
  if (m.capacity != 0 && m.capacity != cfg.pool.slots_per_rank) {
    return invalid("embed: planner.manager.capacity (" + std::to_string(m.capacity) +
                   ") differs from pool.slots_per_rank (" +
                   std::to_string(cfg.pool.slots_per_rank) + ")");
  }
  m.capacity = cfg.pool.slots_per_rank;
  if (auto st = scheduler::validate(m); !st) return st;
  if (cfg.job_timeout.count() < 0) return invalid("embed: job_timeout must be >= 0");
  if (auto st = validate(cfg.faults); !st) return invalid("embed: faults: " + st.message());
  if (cfg.transport != step_transport::zmq && cfg.transport != step_transport::memory) {
    return invalid("embed: transport must be zmq or memory");
  }
  if (cfg.transport == step_transport::memory && cfg.listen) {
    return invalid("embed: the memory transport serves this process only: set listen = false");
  }
  if (cfg.network.actor_threads == 0) return invalid("embed: network.actor_threads must be >= 1");
  const observe_config& o = cfg.observe;
  if (o.kv_events_endpoint.empty() && !o.kv_events_replay_endpoint.empty()) {
    return invalid("embed: observe.kv_events_replay_endpoint needs observe.kv_events_endpoint");
  }
  if (!o.kv_events_endpoint.empty() && !m.enable_events) {
    return invalid("embed: observe.kv_events_endpoint needs planner.manager.enable_events");
  }
  if (!o.kv_events_replay_endpoint.empty() && o.kv_events_buffer == 0) {
    return invalid("embed: observe.kv_events_buffer must be >= 1 with a replay endpoint");
  }
  return {};
}

status validate(const worker_connector_config& cfg) {
  if (auto st = validate_common(cfg.token, cfg.topology, cfg.pool); !st) return st;
  if (auto st = validate_observe(cfg.observe); !st) return st;
  if (cfg.rank >= cfg.topology.world_size()) {
    return invalid("embed: rank " + std::to_string(cfg.rank) + " is outside the world of " +
                   std::to_string(cfg.topology.world_size()) + " ranks");
  }
  if (cfg.block_size_factor == 0) return invalid("embed: block_size_factor must be >= 1");
  if (auto st = validate_tier(cfg.file_tier); !st) return st;
  if (auto st = validate(cfg.faults); !st) return invalid("embed: faults: " + st.message());
  if (cfg.backend.empty() && !cfg.make_copy_engine)
    return invalid("embed: backend is empty (\"sim\" or \"cuda\")");
  if (cfg.register_timeout.count() <= 0) return invalid("embed: register_timeout must be > 0");
  if (cfg.join_timeout.count() <= 0) return invalid("embed: join_timeout must be > 0");
  if (cfg.network.actor_threads == 0) return invalid("embed: network.actor_threads must be >= 1");
  return {};
}

}  // namespace kvc::embed
