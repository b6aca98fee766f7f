#include "launch/roles/node_processes.hpp"

#include "launch/config/fault_options.hpp"

namespace kvc::launch {

namespace {

/// The config's faults (the loader checked every spec).
fault_config faults_of(const launch_config& c) {
  auto f = parse_fault_options(c.runtime.faults, c.runtime.fault_seed);
  return f ? *f : fault_config{};
}

/// What both roles share: topology, pool and network (role_options.hpp), the trace.
template <typename Options>
void fill_shared(Options& o, const launch_config& c, const launch_plan& p, uint32_t node) {
  o.topology = {c.topology.tensor_parallel, c.topology.pipeline_parallel, node};
  o.pool.instance = p.scheduler.pool.instance;
  o.pool.slots = p.scheduler.pool.slots_per_rank;
  o.pool.kv = p.synthetic;
  o.offload = c.offload.enabled;
  if (const auto& t = p.scheduler.file_tier) o.pool.tier = tier_options::of(*t);
  o.network.heartbeat_ms = c.runtime.heartbeat_ms;
  o.network.connection_timeout_ms = c.runtime.connection_timeout_ms;
  o.token = p.scheduler.token;
  if (c.observe.trace != "off") o.trace = {.dir = c.observe.trace_dir, .level = c.observe.trace};
}

}  // namespace

std::string child_config_yaml(const launch_config& config, const std::string& instance) {
  launch_config shown = config;
  shown.runtime.instance = instance;
  shown.runtime.token.clear();  // $KVCONNECT_TOKEN carries it
  return to_yaml(shown);
}

std::vector<std::string> scheduler_arguments(engine_kind engine) {
  return {"scheduler", "--config", "-", "--engine", std::string{to_string(engine)}};
}

std::vector<std::string> worker_arguments(rank_id rank, uint16_t port, uint32_t incarnation,
                                          const std::string& executor) {
  std::vector<std::string> args{"worker", "--config",      "-", "--rank",
                                std::to_string(rank),   "--port", std::to_string(port),
                                "--incarnation",        std::to_string(incarnation)};
  if (!executor.empty()) args.insert(args.end(), {"--executor", executor});
  return args;
}

bool restarts_allowed(const launch_config& c) {
  return c.topology.restart.policy == "on-failure" && c.topology.restart.limit > 0;
}

scheduler_process_options scheduler_options_of(const launch_config& c, const launch_plan& p,
                                               engine_kind engine) {
  scheduler_process_options o;
  fill_shared(o, c, p, 0);
  const auto& r = c.runtime;
  o.host = p.scheduler.network.host;
  o.port = static_cast<uint16_t>(r.port);
  o.job_timeout_ms = r.job_timeout_ms;
  o.job_timeout_steps = r.job_timeout_steps;
  o.ready_timeout_ms = r.ready_timeout_ms;
  o.step_timeout_ms = r.step_timeout_ms;
  o.stop_timeout_ms = r.stop_timeout_ms;
  o.engine = engine;
  o.smoke_steps = c.workload.steps;
  o.config = config_input{c, p};
  o.rank_restarts = restarts_allowed(c);
  if (c.topology.nodes.size() > 1) o.rank_nodes = p.rank_node;
  const auto& ob = c.observe;
  o.metrics_port = static_cast<uint16_t>(ob.metrics_port);
  if (!ob.kv_events.endpoint.empty()) {
    o.kv_events_endpoint = ob.kv_events.endpoint;
    o.kv_events_replay_endpoint = ob.kv_events.replay_endpoint;
    o.kv_events_topic = ob.kv_events.topic;
  }
  if (ob.record) o.record_dir = ob.record_dir.empty() ? ob.trace_dir : ob.record_dir;
  const fault_config faults = faults_of(c);
  o.faults.specs = scheduler_fault_specs(faults);
  if (!o.faults.specs.empty()) o.faults.seed = faults.seed;
  return o;
}

result<worker_process_options> worker_options_of(const launch_config& c, const launch_plan& p,
                                                 rank_id rank) {
  if (rank >= p.workers.size()) {
    return make_error(errc::invalid_argument,
                      "--rank " + std::to_string(rank) + " is outside the world of " +
                          std::to_string(p.workers.size()) + " ranks");
  }
  const auto& w = p.workers[rank];
  worker_process_options o;
  fill_shared(o, c, p, w.topology.node);
  o.host = w.network.host;
  o.rank = rank;
  o.backend = w.backend;
  o.device = w.device;
  o.register_timeout_ms = c.runtime.register_timeout_ms;
  o.gpu_block_size = c.kv_cache.gpu_block_size;
  const fault_config faults = faults_of(c);
  o.faults.specs = worker_fault_specs(faults, rank);
  if (!o.faults.specs.empty()) o.faults.seed = faults.seed;
  return o;
}

}  // namespace kvc::launch
