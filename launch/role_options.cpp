#include "launch/role_options.hpp"

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

void add_topology_flags(CLI::App& cmd, topology_options& topo) {
  cmd.add_option("--tp-size", topo.tp_size, "Tensor-parallel size")->capture_default_str();
  cmd.add_option("--pp-size", topo.pp_size, "Pipeline-parallel size")->capture_default_str();
  cmd.add_option("--node", topo.node, "Node index")->capture_default_str();
}

void add_pool_flags(CLI::App& cmd, pool_options& pool) {
  cmd.add_option("--instance", pool.instance, "Names the node's shm segment")
      ->capture_default_str();
  cmd.add_option("--slots", pool.slots, "CPU slots (offloaded blocks) per rank")
      ->capture_default_str();
  cmd.add_option("--kv-layers", pool.kv.layers, "Layers of the synthetic KV cache")
      ->capture_default_str();
  cmd.add_option("--kv-page-bytes", pool.kv.page_bytes, "Bytes of one GPU block of one layer")
      ->capture_default_str();
  cmd.add_option("--gpu-blocks", pool.kv.gpu_blocks, "GPU blocks per layer (block 0 is null)")
      ->capture_default_str();
  cmd.add_option("--block-factor", pool.kv.block_factor, "GPU blocks per offloaded block")
      ->capture_default_str();
  tier_options& t = pool.tier;
  cmd.add_option("--tier-root-dir", t.root_dir, "The file tier's directory; none: no tier");
  cmd.add_option("--tier-capacity-bytes", t.capacity_bytes, "Bytes the tier's files may take");
  cmd.add_option("--tier-read-threads", t.n_read_threads, "The tier's read threads")
      ->capture_default_str();
  cmd.add_option("--tier-write-threads", t.n_write_threads, "The tier's write threads")
      ->capture_default_str();
  cmd.add_option("--tier-max-pending", t.max_pending_cascades, "Cascades in flight at most")
      ->capture_default_str();
  cmd.add_flag("--tier-no-direct-io", t.no_direct_io, "Buffered I/O for the tier's files");
  cmd.add_option("--tier-io-engine", t.io_engine, "auto | io_uring | threads")
      ->check(CLI::IsMember({"auto", "io_uring", "threads"}))
      ->capture_default_str();
  cmd.add_option("--tier-io-depth", t.io_depth, "io_uring: block I/Os in flight per ring")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd.add_option("--tier-kv", t.kv_description, "What the KV is (part of the run digest)");
}

void add_fault_flags(CLI::App& cmd, fault_options& faults) {
  cmd.add_option("--fault", faults.specs,
                 "Inject a fault: kind:key=value,... (docs/faults.md; repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--fault-seed", faults.seed, "Seed of the injected faults' draws")
      ->capture_default_str();
}

embed::observe_config trace_options::observe() const {
  embed::observe_config o;
  if (dir.empty()) return o;
  o.trace = level == "jobs" ? trace::trace_level::jobs : trace::trace_level::messages;
  o.trace_dir = dir;
  return o;
}

void add_trace_flags(CLI::App& cmd, trace_options& trace) {
  cmd.add_option("--trace", trace.dir,
                 "Record message traces into this directory (docs/observability.md)");
  cmd.add_option("--trace-level", trace.level, "With --trace: messages, or jobs (adds copy jobs)")
      ->check(CLI::IsMember({"messages", "jobs"}))
      ->capture_default_str();
}

void add_network_flags(CLI::App& cmd, std::string& token, network_options& net) {
  cmd.add_option("--token", token, "Shared secret of the deployment")
      ->envname("KVCONNECT_TOKEN")
      ->required();
  cmd.add_option("--heartbeat-ms", net.heartbeat_ms, "Heartbeat interval to peers")
      ->capture_default_str();
  cmd.add_option("--connection-timeout-ms", net.connection_timeout_ms,
                 "Silence after which a peer counts as lost")
      ->capture_default_str();
}

}  // namespace kvc::launch
