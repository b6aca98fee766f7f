#include "launch/roles/role_options.hpp"

#include <unistd.h>

#include <chrono>

#include "actors/scheduler/handshake.hpp"
#include "shm/segment.hpp"
#include "shm/segment_header.hpp"

namespace kvc::launch {

result<pool_plan> derive_pool(const topology_options& topo, const pool_options& pool) {
  if (auto st = validate(topo); !st) {
    return make_error(errc::invalid_argument, "--tp-size / --pp-size: " + st.message());
  }
  if (pool.instance.empty()) return make_error(errc::invalid_argument, "--instance is empty");
  for (char c : pool.instance) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      return make_error(errc::invalid_argument,
                        "--instance may only hold letters, digits, '-', '_' and '.'");
    }
  }
  if (auto st = validate(pool.kv); !st) return st;
  pool_plan plan;
  plan.segment = shm::segment_name(::getuid(), pool.instance, topo.node);
  plan.geometry = {topo.world_size(), pool.slots, pool.kv.slot_bytes()};
  if (auto st = shm::validate(plan.geometry); !st) return st;
  plan.layout_checksum = shm::layout_checksum(plan.geometry);
  return plan;
}

embed::network_config network_options::facade(const std::string& host, uint16_t port) const {
  embed::network_config n;
  n.host = host;
  n.port = port;
  n.heartbeat_interval = std::chrono::milliseconds{heartbeat_ms};
  n.connection_timeout = std::chrono::milliseconds{connection_timeout_ms};
  return n;
}

embed::observe_config trace_options::observe() const {
  embed::observe_config o;
  if (dir.empty()) return o;
  o.trace = level == "jobs" ? trace::trace_level::jobs : trace::trace_level::messages;
  o.trace_dir = dir;
  return o;
}

}  // namespace kvc::launch
