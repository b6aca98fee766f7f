#include "launch/role_options.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>

#include "actors/scheduler/handshake.hpp"
#include "launch/config_file.hpp"
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

CLI::Option* add_config_flag(CLI::App& cmd, std::string& path) {
  return cmd.add_option("--config", path,
                        "Launch config (YAML, docs/config.md; - reads standard input) the options "
                        "come from; the other flags given override it");
}

result<config_input> load_role_config(const std::string& path, const std::string& token,
                                      const std::string& who) {
  auto loaded = load_config_file(path, {});
  if (!loaded.ok()) {
    print_config_errors(loaded, who);
    return make_error(errc::invalid_argument, "--config " + path + ": not a valid config");
  }
  const std::string& instance = loaded.config.runtime.instance;
  auto plan = make_plan(loaded.config, instance.empty() ? defaults::instance : instance, token);
  if (!plan) return make_error(errc::invalid_argument, "--config " + path + ": " +
                                                           plan.error().message());
  return config_input{std::move(loaded.config), std::move(plan).value()};
}

int apply_role_config(CLI::App& cmd, const std::string& path, const std::string& token,
                      const std::string& who,
                      const std::function<status(const config_input&)>& fill) {
  if (path.empty()) return 0;
  auto in = load_role_config(path, token, who);
  status st = in ? fill(*in) : status{in.error()};
  if (!st) {
    std::cerr << "kvconnect " << who << ": " << st.message() << std::endl;
    return 2;
  }
  // An option's callback stores its parsed results into the variable it is bound to; running
  // it again after the config filled the options puts the command line's values back on top.
  for (CLI::Option* opt : cmd.get_options()) {
    if (opt->count() > 0) opt->run_callback();
  }
  return 0;
}

}  // namespace kvc::launch
