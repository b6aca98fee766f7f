#include "launch/cli/role_flags.hpp"

#include <iostream>

#include "launch/config/config_file.hpp"

namespace kvc::launch {

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
  embed::file_tier_config& t = pool.tier.tier;
  cmd.add_option("--tier-root-dir", t.root_dir, "The file tier's directory; none: no tier");
  cmd.add_option("--tier-capacity-bytes", t.capacity_bytes, "Bytes the tier's files may take");
  cmd.add_option("--tier-read-threads", t.n_read_threads, "The tier's read threads")
      ->capture_default_str();
  cmd.add_option("--tier-write-threads", t.n_write_threads, "The tier's write threads")
      ->capture_default_str();
  cmd.add_option("--tier-max-pending", t.max_pending_cascades, "Cascades in flight at most")
      ->capture_default_str();
  cmd.add_flag("--tier-no-direct-io", pool.tier.no_direct_io,
               "Buffered I/O for the tier's files");
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
  auto plan = make_geometry_plan(loaded.config, instance.empty() ? defaults::instance : instance, token);
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
