#include "launch/config/launch_config.hpp"

#include <charconv>

#include <yaml-cpp/yaml.h>

namespace kvc::launch {

namespace {

/// The shortest text that reads back as the same double.
std::string shortest(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc{} ? std::string(buf, end) : std::to_string(v);
}

void emit_string(YAML::Emitter& out, const char* key, const std::string& value) {
  out << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << value;
}

template <class T>
void emit_number(YAML::Emitter& out, const char* key, T value) {
  out << YAML::Key << key << YAML::Value << value;
}

void emit_double(YAML::Emitter& out, const char* key, double value) {
  out << YAML::Key << key << YAML::Value << shortest(value);
}

void emit_range(YAML::Emitter& out, const char* key, const token_range& r) {
  out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  emit_number(out, "min", r.min);
  emit_number(out, "max", r.max);
  out << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const launch_config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;

  out << YAML::Key << "topology" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const auto& n : c.topology.nodes) {
    out << YAML::Flow << YAML::BeginMap;
    emit_string(out, "name", n.name);
    emit_string(out, "host", n.host);
    emit_number(out, "shm_bytes", n.shm_bytes);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  emit_number(out, "tensor_parallel", c.topology.tensor_parallel);
  emit_number(out, "pipeline_parallel", c.topology.pipeline_parallel);
  out << YAML::Key << "placement" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& p : c.topology.placement) out << YAML::DoubleQuoted << p;
  out << YAML::EndSeq;
  emit_string(out, "backend", c.topology.backend);
  out << YAML::Key << "restart" << YAML::Value << YAML::Flow << YAML::BeginMap;
  emit_string(out, "policy", c.topology.restart.policy);
  emit_number(out, "limit", c.topology.restart.limit);
  out << YAML::EndMap;
  out << YAML::EndMap;

  const auto& k = c.kv_cache;
  out << YAML::Key << "kv_cache" << YAML::Value << YAML::BeginMap;
  emit_number(out, "layers", k.layers);
  emit_number(out, "kv_heads", k.kv_heads);
  emit_number(out, "head_dim", k.head_dim);
  emit_number(out, "dtype_bytes", k.dtype_bytes);
  emit_number(out, "page_bytes", k.page_bytes);
  emit_number(out, "gpu_block_size", k.gpu_block_size);
  emit_number(out, "hash_block_size", k.hash_block_size);
  emit_number(out, "gpu_blocks", k.gpu_blocks);
  emit_string(out, "layout", k.layout);
  out << YAML::Key << "enable_prefix_caching" << YAML::Value
      << (k.enable_prefix_caching ? "true" : "false");
  out << YAML::EndMap;

  const auto& o = c.offload;
  out << YAML::Key << "offload" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enabled" << YAML::Value << (o.enabled ? "true" : "false");
  emit_number(out, "cpu_bytes_to_use", o.cpu_bytes_to_use);
  emit_number(out, "block_size", o.block_size);
  emit_string(out, "eviction_policy", o.eviction_policy);
  emit_number(out, "store_threshold", o.store_threshold);
  emit_number(out, "max_tracker_size", o.max_tracker_size);
  out << YAML::Key << "secondary_tiers" << YAML::Value << YAML::BeginSeq;
  for (const auto& t : o.secondary_tiers) {
    out << YAML::Flow << YAML::BeginMap;
    emit_string(out, "type", t.type);
    emit_string(out, "root_dir", t.root_dir);
    emit_number(out, "capacity_bytes", t.capacity_bytes);
    emit_number(out, "n_read_threads", t.n_read_threads);
    emit_number(out, "n_write_threads", t.n_write_threads);
    emit_number(out, "max_pending_cascades", t.max_pending_cascades);
    out << YAML::Key << "direct_io" << YAML::Value << (t.direct_io ? "true" : "false");
    emit_string(out, "io_engine", t.io_engine);
    emit_number(out, "io_depth", t.io_depth);
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  out << YAML::EndMap;

  const auto& r = c.runtime;
  out << YAML::Key << "runtime" << YAML::Value << YAML::BeginMap;
  emit_string(out, "host", r.host);
  emit_number(out, "port", r.port);
  emit_number(out, "executor_port", r.executor_port);
  emit_string(out, "token", r.token);
  emit_string(out, "instance", r.instance);
  emit_string(out, "log_level", r.log_level);
  emit_number(out, "heartbeat_ms", r.heartbeat_ms);
  emit_number(out, "connection_timeout_ms", r.connection_timeout_ms);
  emit_number(out, "register_timeout_ms", r.register_timeout_ms);
  emit_number(out, "ready_timeout_ms", r.ready_timeout_ms);
  emit_number(out, "step_timeout_ms", r.step_timeout_ms);
  emit_number(out, "stop_timeout_ms", r.stop_timeout_ms);
  emit_number(out, "job_timeout_ms", r.job_timeout_ms);
  emit_number(out, "job_timeout_steps", r.job_timeout_steps);
  emit_number(out, "progress_interval_ms", r.progress_interval_ms);
  out << YAML::Key << "faults" << YAML::Value << YAML::Flow << YAML::BeginSeq;
  for (const auto& f : r.faults) out << YAML::DoubleQuoted << f;
  out << YAML::EndSeq;
  emit_number(out, "fault_seed", r.fault_seed);
  out << YAML::EndMap;

  const auto& w = c.workload;
  out << YAML::Key << "workload" << YAML::Value << YAML::BeginMap;
  emit_number(out, "requests", w.requests);
  emit_double(out, "arrival_rate", w.arrival_rate);
  emit_range(out, "prompt_tokens", w.prompt_tokens);
  emit_number(out, "documents", w.documents);
  emit_double(out, "zipf", w.zipf);
  emit_range(out, "shared_prefix_tokens", w.shared_prefix_tokens);
  out << YAML::Key << "multi_turn" << YAML::Value << YAML::Flow << YAML::BeginMap;
  emit_double(out, "probability", w.multi_turn.probability);
  emit_number(out, "max_turns", w.multi_turn.max_turns);
  out << YAML::EndMap;
  emit_range(out, "output_tokens", w.output_tokens);
  emit_number(out, "max_running", w.max_running);
  emit_number(out, "max_batched_tokens", w.max_batched_tokens);
  emit_double(out, "prefill_token_us", w.prefill_token_us);
  emit_double(out, "decode_step_us", w.decode_step_us);
  emit_double(out, "load_token_us", w.load_token_us);
  emit_number(out, "seed", w.seed);
  emit_number(out, "steps", w.steps);
  emit_number(out, "drain_steps", w.drain_steps);
  out << YAML::EndMap;

  const auto& ob = c.observe;
  out << YAML::Key << "observe" << YAML::Value << YAML::BeginMap;
  emit_number(out, "metrics_port", ob.metrics_port);
  out << YAML::Key << "kv_events" << YAML::Value << YAML::BeginMap;
  emit_string(out, "endpoint", ob.kv_events.endpoint);
  emit_string(out, "replay_endpoint", ob.kv_events.replay_endpoint);
  emit_string(out, "topic", ob.kv_events.topic);
  out << YAML::EndMap;
  emit_string(out, "trace", ob.trace);
  emit_string(out, "trace_dir", ob.trace_dir);
  out << YAML::Key << "record" << YAML::Value << (ob.record ? "true" : "false");
  emit_string(out, "record_dir", ob.record_dir);
  out << YAML::EndMap;

  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string step_wait_problem(uint32_t step_ms, uint32_t job_ms, const std::string& step_key,
                              const std::string& job_key, bool deadline_needed) {
  if (job_ms == 0) {
    if (!deadline_needed) return "";
    return job_key + " is 0 (no deadline by time), but the engine waits for each step's output " +
           "for " + step_key + " (" + std::to_string(step_ms) +
           ") and only a deadline by time releases a step whose report was lost: a lost report " +
           "would end the run; set " + job_key + " below " + step_key;
  }
  if (step_ms > job_ms) return "";
  return step_key + " (" + std::to_string(step_ms) + ") must exceed " + job_key + " (" +
         std::to_string(job_ms) + "): the engine would stop waiting for a step before the " +
         "coordinator fails the jobs of a lost report, and the report would end the run";
}

uint16_t executor_port_of(const runtime_section& r) {
  if (r.executor_port != 0) return static_cast<uint16_t>(r.executor_port);
  if (r.port == 0 || r.port >= 65535) return 0;
  return static_cast<uint16_t>(r.port + 1);
}

}  // namespace kvc::launch
