#include "launch/node_processes.hpp"

#include "launch/fault_options.hpp"

namespace kvc::launch {

namespace {

std::string str(uint64_t v) {
  return std::to_string(v);
}

/// The flags both roles share (role_options.hpp: topology, pool, network).
std::vector<std::string> shared_flags(const launch_config& c, const launch_plan& p, uint32_t node) {
  const auto& pool = p.scheduler.pool;
  std::vector<std::string> flags{"--tp-size",
                                 str(c.topology.tensor_parallel),
                                 "--pp-size",
                                 str(c.topology.pipeline_parallel),
                                 "--node",
                                 str(node),
                                 "--instance",
                                 pool.instance,
                                 "--slots",
                                 str(pool.slots_per_rank),
                                 "--kv-layers",
                                 str(p.synthetic.layers),
                                 "--kv-page-bytes",
                                 str(p.synthetic.page_bytes),
                                 "--gpu-blocks",
                                 str(p.synthetic.gpu_blocks),
                                 "--block-factor",
                                 str(p.synthetic.block_factor),
                                 "--heartbeat-ms",
                                 str(c.runtime.heartbeat_ms),
                                 "--connection-timeout-ms",
                                 str(c.runtime.connection_timeout_ms)};
  if (c.observe.trace != "off") {
    flags.insert(flags.end(), {"--trace", c.observe.trace_dir, "--trace-level", c.observe.trace});
  }
  if (const auto& t = p.scheduler.file_tier) {
    flags.insert(flags.end(), {"--tier-root-dir", t->root_dir, "--tier-capacity-bytes",
                               str(t->capacity_bytes), "--tier-read-threads",
                               str(t->n_read_threads), "--tier-write-threads",
                               str(t->n_write_threads), "--tier-max-pending",
                               str(t->max_pending_cascades), "--tier-io-engine", t->io_engine,
                               "--tier-io-depth", str(t->io_depth), "--tier-kv",
                               t->kv_description});
    if (!t->direct_io) flags.push_back("--tier-no-direct-io");
  }
  return flags;
}

/// The config's faults (the loader checked every spec).
fault_config faults_of(const launch_config& c) {
  auto f = parse_fault_options(c.runtime.faults, c.runtime.fault_seed);
  return f ? *f : fault_config{};
}

void append(std::vector<std::string>& to, std::vector<std::string> more) {
  to.insert(to.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

std::vector<std::string> scheduler_arguments(const launch_config& c, const launch_plan& p,
                                             bool sim_engine) {
  std::vector<std::string> args{"scheduler"};
  append(args, shared_flags(c, p, 0));
  const auto& r = c.runtime;
  append(args, {"--host", p.scheduler.network.host, "--port", str(r.port), "--job-timeout-ms",
                str(r.job_timeout_ms), "--job-timeout-steps", str(r.job_timeout_steps),
                "--ready-timeout-ms", str(r.ready_timeout_ms), "--step-timeout-ms",
                str(r.step_timeout_ms), "--stop-timeout-ms", str(r.stop_timeout_ms)});
  if (sim_engine) {
    launch_config shown = c;
    shown.runtime.token.clear();  // other users can read a command line
    append(args, {"--sim-engine-config", to_yaml(shown)});
  } else {
    append(args, {"--smoke-steps", str(c.workload.steps)});
  }
  if (restarts_allowed(c)) args.push_back("--rank-restarts");
  if (c.topology.nodes.size() > 1) {
    std::string nodes;
    for (uint32_t n : p.rank_node) nodes += (nodes.empty() ? "" : ",") + str(n);
    append(args, {"--rank-nodes", nodes});
  }
  const auto& ob = c.observe;
  if (ob.metrics_port != 0) append(args, {"--metrics-port", str(ob.metrics_port)});
  if (!ob.kv_events.endpoint.empty()) {
    append(args, {"--kv-events-endpoint", ob.kv_events.endpoint});
    if (!ob.kv_events.replay_endpoint.empty()) {
      append(args, {"--kv-events-replay-endpoint", ob.kv_events.replay_endpoint});
    }
    if (!ob.kv_events.topic.empty()) append(args, {"--kv-events-topic", ob.kv_events.topic});
  }
  if (ob.record) append(args, {"--record", ob.record_dir.empty() ? ob.trace_dir : ob.record_dir});
  append(args, scheduler_fault_arguments(faults_of(c)));
  return args;
}

bool restarts_allowed(const launch_config& c) {
  return c.topology.restart.policy == "on-failure" && c.topology.restart.limit > 0;
}

std::vector<std::string> worker_arguments(const launch_config& c, const launch_plan& p,
                                          rank_id rank, uint16_t port, uint32_t incarnation,
                                          const std::string& executor) {
  const auto& w = p.workers.at(rank);
  std::vector<std::string> args{"worker"};
  append(args, shared_flags(c, p, w.topology.node));
  append(args,
         {"--host", w.network.host, "--port", str(port), "--rank", str(rank), "--backend",
          w.backend, "--device", str(static_cast<uint64_t>(w.device)), "--register-timeout-ms",
          str(c.runtime.register_timeout_ms), "--incarnation", str(incarnation)});
  if (!executor.empty()) {
    append(args, {"--executor", executor, "--gpu-block-size", str(c.kv_cache.gpu_block_size)});
  }
  append(args, worker_fault_arguments(faults_of(c), rank));
  return args;
}

}  // namespace kvc::launch
