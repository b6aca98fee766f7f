#include "launch/node_processes.hpp"

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
  return flags;
}

void append(std::vector<std::string>& to, std::vector<std::string> more) {
  to.insert(to.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
}

}  // namespace

std::vector<std::string> scheduler_arguments(const launch_config& c, const launch_plan& p) {
  std::vector<std::string> args{"scheduler"};
  append(args, shared_flags(c, p, 0));
  const auto& r = c.runtime;
  append(args, {"--host", r.host, "--port", str(r.port), "--job-timeout-ms", str(r.job_timeout_ms),
                "--smoke-steps", str(c.workload.steps), "--ready-timeout-ms",
                str(r.ready_timeout_ms), "--step-timeout-ms", str(r.step_timeout_ms),
                "--stop-timeout-ms", str(r.stop_timeout_ms)});
  return args;
}

std::vector<std::string> worker_arguments(const launch_config& c, const launch_plan& p,
                                          rank_id rank, uint16_t port) {
  const auto& w = p.workers.at(rank);
  std::vector<std::string> args{"worker"};
  append(args, shared_flags(c, p, w.topology.node));
  append(args, {"--host", w.network.host, "--port", str(port), "--rank", str(rank), "--backend",
                w.backend, "--device", str(static_cast<uint64_t>(w.device)),
                "--register-timeout-ms", str(c.runtime.register_timeout_ms)});
  return args;
}

}  // namespace kvc::launch
