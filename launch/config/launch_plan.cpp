#include "launch/config/launch_plan.hpp"

#include <algorithm>
#include <chrono>
#include <set>

#include "actors/scheduler/manager_config.hpp"
#include "disk/block_file.hpp"
#include "proto/fault_spec_parser.hpp"

namespace kvc::launch {

namespace {

std::string str(uint64_t v) {
  return std::to_string(v);
}

std::string node_path(size_t i) {
  return "topology.nodes[" + str(i) + "]";
}

}  // namespace

kv_geometry derive_geometry(const launch_config& c) {
  const auto& t = c.topology;
  const auto& k = c.kv_cache;
  kv_geometry g;
  g.world_size = t.tensor_parallel * t.pipeline_parallel;
  g.kv_heads_per_rank = std::max<uint32_t>(1, k.kv_heads / t.tensor_parallel);
  g.layers_per_rank = (k.layers + t.pipeline_parallel - 1) / t.pipeline_parallel;
  const uint32_t block = c.offload.block_size == 0 ? k.gpu_block_size : c.offload.block_size;
  g.factor = std::max<uint32_t>(1, block / k.gpu_block_size);
  g.page_bytes = k.page_bytes != 0
                     ? k.page_bytes
                     : 2ull * k.gpu_block_size * g.kv_heads_per_rank * k.head_dim * k.dtype_bytes;
  g.slot_bytes = uint64_t{g.factor} * g.layers_per_rank * g.page_bytes;
  return g;
}

std::vector<uint32_t> rank_nodes(const topology_section& t) {
  const uint32_t world = t.tensor_parallel * t.pipeline_parallel;
  const auto nodes = static_cast<uint32_t>(t.nodes.size());
  std::vector<uint32_t> out;
  if (t.placement.empty()) {
    const uint32_t per_node = nodes == 0 ? world : (world + nodes - 1) / nodes;
    for (uint32_t r = 0; r < world; ++r) out.push_back(per_node == 0 ? 0 : r / per_node);
    return out;
  }
  for (const auto& name : t.placement) {
    uint32_t i = 0;
    while (i < nodes && t.nodes[i].name != name) ++i;
    out.push_back(i);
  }
  return out;
}

std::vector<config_problem> check_config(const launch_config& c, config_use use) {
  const bool launched = use == config_use::launch;
  std::vector<config_problem> out;
  auto problem = [&out](std::string path, std::string message) {
    out.push_back({std::move(path), std::move(message)});
  };
  const auto& t = c.topology;
  const auto& k = c.kv_cache;
  const auto& o = c.offload;
  const uint64_t world = uint64_t{t.tensor_parallel} * t.pipeline_parallel;

  if (c.observe.trace != "off" && c.observe.trace_dir.empty()) {
    problem("observe.trace_dir",
            "observe.trace is " + c.observe.trace + ": a directory for the trace files is needed");
  }

  if (c.observe.record && c.observe.record_dir.empty() && c.observe.trace_dir.empty()) {
    problem("observe.record_dir",
            "observe.record is true: a directory for the record is needed (or observe.trace_dir)");
  }

  // topology
  std::set<std::string> names;
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    if (!names.insert(t.nodes[i].name).second) {
      problem(node_path(i) + ".name", "\"" + t.nodes[i].name + "\" names two nodes");
    }
  }
  if (world > max_world_size) {
    problem("topology.tensor_parallel", "tensor_parallel x pipeline_parallel = " + str(world) +
                                            " ranks, more than the " + str(max_world_size) +
                                            " kvconnect serves");
  }
  const auto nodes_of = rank_nodes(t);
  if (!t.placement.empty()) {
    for (size_t r = 0; r < t.placement.size(); ++r) {
      if (nodes_of[r] >= t.nodes.size()) {
        problem("topology.placement[" + str(r) + "]",
                "\"" + t.placement[r] + "\" is not a node of topology.nodes");
      }
    }
    if (t.placement.size() != world) {
      problem("topology.placement", "places " + str(t.placement.size()) +
                                        " ranks, but tensor_parallel x " +
                                        "pipeline_parallel = " + str(t.tensor_parallel) + " x " +
                                        str(t.pipeline_parallel) + " = " + str(world));
    }
  }
  if (world <= max_world_size) {
    for (size_t i = 0; i < t.nodes.size(); ++i) {
      if (std::find(nodes_of.begin(), nodes_of.end(), i) == nodes_of.end()) {
        problem(node_path(i), "node \"" + t.nodes[i].name + "\" has no rank (" + str(world) +
                                  " ranks over " + str(t.nodes.size()) + " nodes)");
      }
    }
  }

  // kv_cache
  if (k.page_bytes == 0 && k.kv_heads % t.tensor_parallel != 0 &&
      t.tensor_parallel % k.kv_heads != 0) {
    problem("kv_cache.kv_heads", str(k.kv_heads) + " heads cannot be split over tensor_parallel " +
                                     str(t.tensor_parallel) + " ranks (one must divide the other)");
  }
  if (k.layers < t.pipeline_parallel) {
    problem("kv_cache.layers", str(k.layers) + " layers are fewer than pipeline_parallel " +
                                   str(t.pipeline_parallel) + " stages");
  }

  if (k.hash_block_size != 0 && k.gpu_block_size % k.hash_block_size != 0) {
    problem("kv_cache.hash_block_size", str(k.hash_block_size) + " tokens does not divide " +
                                            "kv_cache.gpu_block_size " + str(k.gpu_block_size));
  }

  // offload
  const uint32_t block = o.block_size == 0 ? k.gpu_block_size : o.block_size;
  const bool block_ok = block % k.gpu_block_size == 0;
  if (!block_ok) {
    problem("offload.block_size", str(block) + " tokens is not a multiple of " +
                                      "kv_cache.gpu_block_size " + str(k.gpu_block_size));
  }
  if (o.enabled && block_ok && world <= max_world_size) {
    const auto g = derive_geometry(c);
    auto pool = shm::size_pool(o.cpu_bytes_to_use, g.world_size, g.slot_bytes);
    if (!pool) {
      problem("offload.cpu_bytes_to_use",
              str(o.cpu_bytes_to_use) + " bytes hold no offloaded block per rank: one block " +
                  "takes " + str(g.slot_bytes) + " bytes on each of " + str(g.world_size) +
                  " ranks (needs >= " + str(g.slot_bytes * g.world_size) + ")");
    } else {
      for (size_t i = 0; i < t.nodes.size(); ++i) {
        if (t.nodes[i].shm_bytes != 0 && pool->segment_bytes() > t.nodes[i].shm_bytes) {
          problem(node_path(i) + ".shm_bytes",
                  "the node's segment takes " + str(pool->segment_bytes()) +
                      " bytes (pool of offload.cpu_bytes_to_use plus a 2 MiB header), more " +
                      "than " + str(t.nodes[i].shm_bytes));
        }
      }
      if (pool->num_slots > scheduler::max_manager_capacity) {
        problem("offload.cpu_bytes_to_use", str(pool->num_slots) + " slots per rank, more than " +
                                                "the offload manager's " +
                                                str(scheduler::max_manager_capacity));
      }
      // The smoke run stores a source group and loads it into a destination group.
      if (launched && pool->num_slots < 2) {
        problem("offload.cpu_bytes_to_use", "holds " + str(pool->num_slots) +
                                                " slot per rank; the smoke run needs 2 (>= " +
                                                str(2 * g.slot_bytes * g.world_size) + " bytes)");
      }
      if (launched && uint64_t{k.gpu_blocks} < 2ull * g.factor + 1) {
        problem(
            "kv_cache.gpu_blocks",
            str(k.gpu_blocks) + " GPU blocks are too few for the smoke run: needs >= 2 x " +
                "(offload.block_size / kv_cache.gpu_block_size) + 1 = " + str(2ull * g.factor + 1));
      }
    }
  }

  // workload
  const auto& w = c.workload;
  if (w.prompt_tokens.min > w.prompt_tokens.max) {
    problem("workload.prompt_tokens",
            "min " + str(w.prompt_tokens.min) + " > max " + str(w.prompt_tokens.max));
  }
  if (w.shared_prefix_tokens.min > w.shared_prefix_tokens.max) {
    problem("workload.shared_prefix_tokens",
            "min " + str(w.shared_prefix_tokens.min) + " > max " + str(w.shared_prefix_tokens.max));
  }
  if (w.shared_prefix_tokens.max > w.prompt_tokens.max) {
    problem("workload.shared_prefix_tokens.max", str(w.shared_prefix_tokens.max) +
                                                     " tokens exceed workload.prompt_tokens.max " +
                                                     str(w.prompt_tokens.max));
  }
  if (w.output_tokens.min > w.output_tokens.max) {
    problem("workload.output_tokens",
            "min " + str(w.output_tokens.min) + " > max " + str(w.output_tokens.max));
  }

  // observe
  const auto& ev = c.observe.kv_events;
  if (ev.endpoint.empty() && !ev.replay_endpoint.empty()) {
    problem("observe.kv_events.replay_endpoint", "needs observe.kv_events.endpoint");
  }
  if (c.observe.metrics_port != 0 && c.observe.metrics_port == c.runtime.port) {
    problem("observe.metrics_port",
            "port " + str(c.observe.metrics_port) + " is runtime.port as well");
  }
  // The executor channel (runtime.executor_port, derived as runtime.port + 1 when 0).
  const auto& rt = c.runtime;
  if (rt.executor_port == 0 && rt.port == 65535) {
    problem("runtime.executor_port",
            "0 derives runtime.port + 1, beyond 65535: set runtime.executor_port");
  }
  if (const uint16_t exec = executor_port_of(rt); exec != 0) {
    const std::string key = "runtime.executor_port";
    const std::string which =
        rt.executor_port != 0 ? "port " + str(exec) : "0 derives runtime.port + 1 = " + str(exec);
    if (exec == rt.port) problem(key, which + ", which is runtime.port as well");
    if (exec == c.observe.metrics_port) problem(key, which + ", which is observe.metrics_port");
  }
  if (auto p = step_wait_problem(rt.step_timeout_ms, rt.job_timeout_ms, "runtime.step_timeout_ms",
                                 "runtime.job_timeout_ms", false);
      !p.empty()) {
    problem("runtime.step_timeout_ms", std::move(p));
  }
  // The simulated engine refuses nothing: its longest request must fit in the GPU blocks.
  const uint64_t longest = uint64_t{w.prompt_tokens.max} + w.output_tokens.max;
  const uint64_t room = uint64_t{k.gpu_blocks - 1} * k.gpu_block_size;
  if (launched && longest > room) {
    problem("kv_cache.gpu_blocks",
            str(k.gpu_blocks) + " GPU blocks of " + str(k.gpu_block_size) + " tokens hold " +
                str(room) + " tokens (block 0 is the null block), fewer than the longest " +
                "request: workload.prompt_tokens.max + workload.output_tokens.max = " +
                str(longest));
  }
  return out;
}

std::vector<rank_id> launch_plan::ranks_on(uint32_t node) const {
  std::vector<rank_id> out;
  for (rank_id r = 0; r < rank_node.size(); ++r) {
    if (rank_node[r] == node) out.push_back(r);
  }
  return out;
}

namespace {

/// The facades' file tier of offload.secondary_tiers[0]; the KV description is the KV cache's
/// shape, so another shape never reads these files.
embed::file_tier_config file_tier_of(const launch_config& c) {
  const secondary_tier_config& t = c.offload.secondary_tiers[0];
  const kv_cache_section& k = c.kv_cache;
  return {.root_dir = t.root_dir,
          .capacity_bytes = t.capacity_bytes,
          .n_read_threads = t.n_read_threads,
          .n_write_threads = t.n_write_threads,
          .max_pending_cascades = t.max_pending_cascades,
          .direct_io = t.direct_io,
          .io_engine = t.io_engine,
          .io_depth = t.io_depth,
          .kv_description = "layers=" + std::to_string(k.layers) + " kv_heads=" +
                            std::to_string(k.kv_heads) + " head_dim=" +
                            std::to_string(k.head_dim) + " dtype_bytes=" +
                            std::to_string(k.dtype_bytes) + " page_bytes=" +
                            std::to_string(k.page_bytes) + " gpu_block_size=" +
                            std::to_string(k.gpu_block_size) + " layout=" + k.layout};
}

}  // namespace

status check_tier_config(const launch_config& c) {
  const auto& tiers = c.offload.secondary_tiers;
  if (tiers.empty()) {
    for (const std::string& text : c.runtime.faults) {
      auto spec = parse_fault_spec(text);  // the loader checked it; a bad one is not ours
      if (spec.ok() && spec->kind == fault_kind::fail_io) {
        return make_error(errc::invalid_argument,
                          "runtime.faults: " + text +
                              ": fail_io fails file tier jobs, and there is no file tier "
                              "(offload.secondary_tiers)");
      }
    }
  }
  if (tiers.size() > 1) {
    return make_error(errc::invalid_argument, "offload.secondary_tiers: " +
                                                  std::to_string(tiers.size()) +
                                                  " tiers; one (the fs tier) is supported");
  }
  const uint64_t block_file = disk::file_bytes(derive_geometry(c).slot_bytes);
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i].capacity_bytes < block_file) {
      return make_error(errc::invalid_argument,
                        "offload.secondary_tiers[" + std::to_string(i) + "].capacity_bytes: " +
                            std::to_string(tiers[i].capacity_bytes) +
                            " bytes hold no block file of " + std::to_string(block_file) +
                            " bytes (one rank's offloaded block and a 4 KiB header)");
    }
  }
  return status::success();
}

result<launch_plan> make_plan(const launch_config& c, const std::string& instance,
                              const std::string& token, config_use use) {
  if (auto problems = check_config(c, use); !problems.empty()) {
    return make_error(errc::invalid_argument, problems[0].key_path + ": " + problems[0].message);
  }
  if (!c.offload.enabled) {
    return make_error(errc::invalid_argument, "offload.enabled: false: no pool to plan");
  }
  using std::chrono::milliseconds;
  const auto& r = c.runtime;
  launch_plan p;
  p.kv = derive_geometry(c);
  p.synthetic = {.layers = p.kv.layers_per_rank,
                 .page_bytes = p.kv.page_bytes,
                 .gpu_blocks = c.kv_cache.gpu_blocks,
                 .block_factor = p.kv.factor};
  auto pool = shm::size_pool(c.offload.cpu_bytes_to_use, p.kv.world_size, p.kv.slot_bytes);
  if (!pool) return pool.error();
  p.pool = *pool;
  p.rank_node = rank_nodes(c.topology);

  embed::network_config net;
  net.host = r.host;
  net.port = static_cast<uint16_t>(r.port);
  net.heartbeat_interval = milliseconds{r.heartbeat_ms};
  net.connection_timeout = milliseconds{r.connection_timeout_ms};
  const embed::pool_config pool_cfg{.instance = instance,
                                    .slots_per_rank = p.pool.num_slots,
                                    .slot_bytes = p.pool.slot_bytes,
                                    .prefault = false};
  const topology topo{c.topology.tensor_parallel, c.topology.pipeline_parallel, 0};
  auto trace_level = trace::parse_trace_level(c.observe.trace);
  if (!trace_level) return trace_level.error();
  embed::observe_config observe;  // what workers read of it: the trace fields
  observe.trace = *trace_level;
  observe.trace_dir = c.observe.trace_dir;

  const bool multi_node = c.topology.nodes.size() > 1;
  auto& s = p.scheduler;
  s.network = net;
  // Several nodes: the scheduler listens on the first node's host, where the others reach it.
  if (multi_node) s.network.host = c.topology.nodes[0].host;
  s.token = token;
  s.topology = topo;
  s.nodes = static_cast<uint32_t>(c.topology.nodes.size());
  s.pool = pool_cfg;
  s.planner.gpu_block_size = c.kv_cache.gpu_block_size;
  s.planner.offloaded_block_size = p.kv.factor * c.kv_cache.gpu_block_size;
  s.planner.hash_block_size = c.kv_cache.hash_block_size;
  s.planner.enable_prefix_caching = c.kv_cache.enable_prefix_caching;
  auto policy = scheduler::parse_eviction_policy(c.offload.eviction_policy);
  if (!policy) return policy.error();
  s.planner.manager.capacity = p.pool.num_slots;
  s.planner.manager.policy = *policy;
  s.planner.manager.store_threshold = c.offload.store_threshold;
  s.planner.manager.max_tracker_size = c.offload.max_tracker_size;
  s.job_timeout = milliseconds{r.job_timeout_ms};
  s.ready_timeout = milliseconds{r.ready_timeout_ms};
  s.observe.serve_metrics = c.observe.metrics_port != 0;
  s.observe.metrics_port = static_cast<uint16_t>(c.observe.metrics_port);
  s.observe.kv_events_endpoint = c.observe.kv_events.endpoint;
  s.observe.kv_events_replay_endpoint = c.observe.kv_events.replay_endpoint;
  s.observe.kv_events_topic = c.observe.kv_events.topic;
  s.job_timeout_steps = r.job_timeout_steps;
  s.observe.trace = observe.trace;
  s.observe.trace_dir = observe.trace_dir;
  s.observe.record = c.observe.record;
  s.observe.record_dir = c.observe.record_dir;
  if (auto st = check_tier_config(c); !st) return st;
  if (!c.offload.secondary_tiers.empty()) s.file_tier = file_tier_of(c);
  if (auto st = embed::validate(s); !st) return st;

  // Workers connect to the scheduler, which runs on the first node.
  std::vector<int> next_device(c.topology.nodes.size(), 0);
  for (rank_id rank = 0; rank < p.kv.world_size; ++rank) {
    const uint32_t node = p.rank_node[rank];
    embed::worker_connector_config w;
    w.mode = embed::connection_mode::connect;
    w.network = net;
    w.network.host = s.network.host;
    w.token = token;
    w.topology = topo;
    w.topology.node = node;
    w.pool = pool_cfg;
    w.pool.prefault = true;
    w.rank = rank;
    w.backend = c.topology.backend;
    w.device = next_device[node]++;
    w.block_size_factor = p.kv.factor;
    w.register_timeout = milliseconds{r.register_timeout_ms};
    w.join_timeout = milliseconds{r.ready_timeout_ms};
    w.observe = observe;
    w.file_tier = s.file_tier;
    if (r.port != 0) {
      if (auto st = embed::validate(w); !st) return st;
    }
    p.workers.push_back(std::move(w));
  }
  return p;
}

result<launch_plan> make_geometry_plan(const launch_config& config, const std::string& instance,
                                       const std::string& token, config_use use) {
  launch_config planned = config;
  planned.offload.enabled = true;
  return make_plan(planned, instance, token, use);
}

}  // namespace kvc::launch
