#include "launch/config/config_loader.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include <yaml-cpp/yaml.h>

#include "actors/scheduler/manager_config.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/launch_plan.hpp"

namespace kvc::launch {

namespace {

constexpr uint64_t u32_max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t u64_max = std::numeric_limits<uint64_t>::max();
constexpr uint64_t day_ms = 24ull * 3600 * 1000;

std::string quoted(std::string_view s) {
  return "\"" + std::string(s) + "\"";
}

std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

bool is_index(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// "a.b[1].c" or "a.b.1.c" → {"a", "b", "1", "c"}; empty on a malformed path.
std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::string cur;
  bool ok = true;
  for (size_t i = 0; i < path.size() && ok; ++i) {
    const char c = path[i];
    if (c == '.') {
      if (cur.empty() && (parts.empty() || path[i - 1] != ']')) ok = false;
      if (!cur.empty()) parts.push_back(std::move(cur));
      cur.clear();
    } else if (c == '[') {
      if (!cur.empty()) parts.push_back(std::move(cur));
      cur.clear();
      const size_t close = path.find(']', i);
      if (close == std::string_view::npos || !is_index(path.substr(i + 1, close - i - 1))) {
        ok = false;
      } else {
        parts.emplace_back(path.substr(i + 1, close - i - 1));
        i = close;
      }
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(std::move(cur));
  if (!ok || parts.empty()) return {};
  return parts;
}

/// {"a", "b", "1", "c"} → "a.b[1].c".
std::string render_path(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    if (is_index(p)) {
      out += "[" + p + "]";
    } else {
      out += (out.empty() ? "" : ".") + p;
    }
  }
  return out;
}

bool valid_name(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

const char* kind_of(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  return "a value";
}

/// Reads the YAML tree into a launch_config, collecting every problem with its location.
class reader {
 public:
  using field_reader = std::function<void(const YAML::Node&, const std::string&)>;
  struct field {
    std::string_view key;
    field_reader read;
  };

  reader(std::string file, std::vector<std::string> overridden)
      : file_(std::move(file)), overridden_(std::move(overridden)) {}

  std::vector<config_error> errors;
  std::map<std::string, config_error> seen;  ///< key path → where its value came from

  bool from_set(const std::string& path) const {
    return std::any_of(overridden_.begin(), overridden_.end(), [&](const std::string& o) {
      return path == o || path.starts_with(o + ".") || path.starts_with(o + "[");
    });
  }

  config_error at(const std::string& path, const YAML::Node* n) const {
    config_error e;
    e.key_path = path;
    if (from_set(path)) {
      e.location = "--set";
    } else if (n != nullptr && !n->Mark().is_null()) {
      e.line = n->Mark().line + 1;
      e.location = file_ + ":" + std::to_string(e.line);
    } else {
      e.location = file_;
    }
    return e;
  }

  void error(const std::string& path, const YAML::Node& n, std::string message) {
    auto e = at(path, &n);
    e.message = std::move(message);
    errors.push_back(std::move(e));
  }

  void note(const std::string& path, const YAML::Node& n) { seen[path] = at(path, &n); }

  /// A key given twice in one map. yaml-cpp keeps both entries, and reading them in turn would
  /// let the second silently win, so both places are named and neither is read twice.
  void duplicate(const std::string& path, const std::string& key, const YAML::Mark& first,
                 const YAML::Mark& again) {
    config_error e;
    e.key_path = path;
    e.line = again.is_null() ? 0 : again.line + 1;
    e.location = e.line > 0 ? file_ + ":" + std::to_string(e.line) : file_;
    e.message = "duplicate key " + quoted(key) + ": first at " + place(first) + ", again at " +
                place(again) + " (a key may appear once in a map)";
    errors.push_back(std::move(e));
  }

  /// Reads the keys of a map; nothing (an absent or empty section) keeps the defaults.
  void map(const YAML::Node& n, const std::string& path, const std::vector<field>& fields) {
    if (!n.IsDefined() || n.IsNull()) return;
    std::vector<std::string_view> keys;
    for (const auto& f : fields) keys.push_back(f.key);
    if (!n.IsMap()) {
      error(path, n, std::string("expected a map with keys ") + join(keys) + ", got " + kind_of(n));
      return;
    }
    note(path, n);
    std::unordered_map<std::string, YAML::Mark> first_at;  ///< key → where it was first given
    for (auto it = n.begin(); it != n.end(); ++it) {
      // Copies (handles): `it->first` lives in a temporary proxy that ends with the statement
      // (a dangling reference found by fuzzing under ASan).
      const YAML::Node key_node = it->first;
      const YAML::Node value = it->second;
      if (!key_node.IsScalar()) {
        error(path, key_node, "a key must be a name");
        continue;
      }
      const std::string key = key_node.Scalar();
      const std::string child = path.empty() ? key : path + "." + key;
      if (auto [first, fresh] = first_at.try_emplace(key, key_node.Mark()); !fresh) {
        duplicate(child, key, first->second, key_node.Mark());
        continue;
      }
      auto f =
          std::find_if(fields.begin(), fields.end(), [&](const field& x) { return x.key == key; });
      if (f == fields.end()) {
        std::string msg = "unknown key " + quoted(key);
        if (auto near = closest_name(key, keys); !near.empty()) {
          msg += "; did you mean " + quoted(near) + "?";
        } else {
          msg += " (known: " + join(keys) + ")";
        }
        error(child, key_node, std::move(msg));
        continue;
      }
      f->read(value, child);
    }
  }

  /// An unsigned integer in [min, max]; `bytes` also takes KiB, MiB, GiB and TiB suffixes.
  template <class T>
  void number(const YAML::Node& n, const std::string& path, T& out, uint64_t min, uint64_t max,
              bool bytes = false) {
    if (!n.IsScalar()) {
      error(path, n, std::string("expected an unsigned integer, got ") + kind_of(n));
      return;
    }
    const std::string& s = n.Scalar();
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    bool ok = ec == std::errc{} && end != s.data();
    const std::string_view rest(end, s.data() + s.size() - end);
    if (ok && !rest.empty()) {
      static const std::pair<std::string_view, int> units[] = {
          {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
      auto u = std::find_if(std::begin(units), std::end(units),
                            [&](const auto& x) { return x.first == rest; });
      ok = bytes && u != std::end(units) && v <= (u64_max >> u->second);
      if (ok) v <<= u->second;
    }
    if (!ok) {
      error(path, n,
            quoted(s) + (bytes ? " is not a byte count (an integer, or one with a " +
                                     std::string("KiB, MiB, GiB or TiB suffix)")
                               : " is not an unsigned integer"));
      return;
    }
    if (v < min || v > max) {
      error(path, n, std::to_string(v) + " is out of range: " + range_text(min, max));
      return;
    }
    out = static_cast<T>(v);
    note(path, n);
  }

  void real(const YAML::Node& n, const std::string& path, double& out, double min, double max) {
    if (!n.IsScalar()) {
      error(path, n, std::string("expected a number, got ") + kind_of(n));
      return;
    }
    const std::string& s = n.Scalar();
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v)) {
      error(path, n, quoted(s) + " is not a number");
      return;
    }
    if (v < min || v > max) {
      error(path, n,
            s + " is out of range: must be in [" + shortest(min) + ", " + shortest(max) + "]");
      return;
    }
    out = v;
    note(path, n);
  }

  void text(const YAML::Node& n, const std::string& path, std::string& out, bool required) {
    if (n.IsNull()) {
      if (required) {
        error(path, n, "must not be empty");
      } else {
        out.clear();
        note(path, n);
      }
      return;
    }
    if (!n.IsScalar()) {
      error(path, n, std::string("expected a string, got ") + kind_of(n));
      return;
    }
    if (required && n.Scalar().empty()) {
      error(path, n, "must not be empty");
      return;
    }
    out = n.Scalar();
    note(path, n);
  }

  /// A string naming a segment or a node: letters, digits, '-', '_', '.'.
  void name(const YAML::Node& n, const std::string& path, std::string& out, bool required) {
    std::string v = out;
    const size_t before = errors.size();
    text(n, path, v, required);
    if (errors.size() != before) return;
    if (!valid_name(v)) {
      error(path, n, quoted(v) + " may only hold letters, digits, '-', '_' and '.'");
      return;
    }
    out = v;
  }

  void choice(const YAML::Node& n, const std::string& path, std::string& out,
              std::vector<std::string_view> choices) {
    if (!n.IsScalar()) {
      error(path, n, "expected one of " + join(choices) + ", got " + kind_of(n));
      return;
    }
    const std::string& s = n.Scalar();
    if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
      std::string msg = quoted(s) + " is not one of " + join(choices);
      if (auto near = closest_name(s, choices); !near.empty()) {
        msg += "; did you mean " + quoted(near) + "?";
      }
      error(path, n, std::move(msg));
      return;
    }
    out = s;
    note(path, n);
  }

  void flag(const YAML::Node& n, const std::string& path, bool& out) {
    if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) {
      out = n.Scalar() == "true";
      note(path, n);
      return;
    }
    error(path, n,
          (n.IsScalar() ? quoted(n.Scalar()) : std::string(kind_of(n))) + " is not true or false");
  }

  void range(const YAML::Node& n, const std::string& path, token_range& out, uint64_t min) {
    map(n, path,
        {{"min", [&, min](auto& v, auto& p) { number(v, p, out.min, min, u32_max); }},
         {"max", [&, min](auto& v, auto& p) { number(v, p, out.max, min, u32_max); }}});
  }

 private:
  /// "file:line:column" of a mark (the file alone for a node made by --set).
  std::string place(const YAML::Mark& m) const {
    if (m.is_null()) return file_;
    return file_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
  }
  static std::string shortest(double v) {
    char buf[32];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, end);
  }
  static std::string range_text(uint64_t min, uint64_t max) {
    if (max == u32_max || max == u64_max) return "must be >= " + std::to_string(min);
    return "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  }

  std::string file_;
  std::vector<std::string> overridden_;
};

void read_topology(reader& r, const YAML::Node& n, topology_section& t) {
  r.map(n, "topology",
        {{"nodes",
          [&](const YAML::Node& v, const std::string& p) {
            if (!v.IsSequence() || v.size() == 0) {
              r.error(p, v,
                      std::string("expected a non-empty list of nodes ({name, host, ") +
                          "shm_bytes}), got " + (v.IsSequence() ? "an empty list" : kind_of(v)));
              return;
            }
            r.note(p, v);
            t.nodes.clear();
            for (size_t i = 0; i < v.size(); ++i) {
              node_config nc;
              nc.name = "node" + std::to_string(i);
              const std::string np = p + "[" + std::to_string(i) + "]";
              const YAML::Node item = v[i];
              r.map(item, np,
                    {{"name", [&](auto& x, auto& q) { r.name(x, q, nc.name, true); }},
                     {"host", [&](auto& x, auto& q) { r.text(x, q, nc.host, true); }},
                     {"shm_bytes",
                      [&](auto& x, auto& q) { r.number(x, q, nc.shm_bytes, 0, u64_max, true); }}});
              t.nodes.push_back(std::move(nc));
            }
          }},
         {"tensor_parallel",
          [&](auto& v, auto& p) { r.number(v, p, t.tensor_parallel, 1, max_world_size); }},
         {"pipeline_parallel",
          [&](auto& v, auto& p) { r.number(v, p, t.pipeline_parallel, 1, max_world_size); }},
         {"placement",
          [&](const YAML::Node& v, const std::string& p) {
            if (v.IsNull()) {
              t.placement.clear();
              r.note(p, v);
              return;
            }
            if (!v.IsSequence()) {
              r.error(
                  p, v,
                  std::string("expected a list of node names, one per rank, got ") + kind_of(v));
              return;
            }
            r.note(p, v);
            t.placement.clear();
            for (size_t i = 0; i < v.size(); ++i) {
              std::string name;
              r.text(v[i], p + "[" + std::to_string(i) + "]", name, true);
              t.placement.push_back(name);
            }
          }},
         {"backend",
          [&](auto& v, auto& p) {
            r.choice(v, p, t.backend, {"sim", "cuda"});
          }},
         {"restart", [&](const YAML::Node& v, const std::string& p) {
            r.map(v, p,
                  {{"policy",
                    [&](auto& x, auto& q) {
                      r.choice(x, q, t.restart.policy, {"never", "on-failure"});
                    }},
                   {"limit", [&](auto& x, auto& q) { r.number(x, q, t.restart.limit, 0, 1000); }}});
          }}});
}

void read_kv_cache(reader& r, const YAML::Node& n, kv_cache_section& k) {
  r.map(
      n, "kv_cache",
      {{"layers", [&](auto& v, auto& p) { r.number(v, p, k.layers, 1, 1u << 16); }},
       {"kv_heads", [&](auto& v, auto& p) { r.number(v, p, k.kv_heads, 1, 1u << 16); }},
       {"head_dim", [&](auto& v, auto& p) { r.number(v, p, k.head_dim, 1, 1u << 16); }},
       {"dtype_bytes", [&](auto& v, auto& p) { r.number(v, p, k.dtype_bytes, 1, 8); }},
       {"page_bytes", [&](auto& v, auto& p) { r.number(v, p, k.page_bytes, 0, 1ull << 40, true); }},
       {"gpu_block_size", [&](auto& v, auto& p) { r.number(v, p, k.gpu_block_size, 1, 1u << 16); }},
       {"hash_block_size",
        [&](auto& v, auto& p) { r.number(v, p, k.hash_block_size, 0, 1u << 16); }},
       {"gpu_blocks", [&](auto& v, auto& p) { r.number(v, p, k.gpu_blocks, 2, 1u << 30); }},
       {"layout",
        [&](auto& v, auto& p) {
          r.choice(v, p, k.layout, {"flash_attn", "flashinfer", "cross_layer"});
        }},
       {"enable_prefix_caching",
        [&](auto& v, auto& p) { r.flag(v, p, k.enable_prefix_caching); }}});
}

/// offload.secondary_tiers: a list (empty or null: no tier) of {type: fs, root_dir,
/// capacity_bytes, ...}; root_dir and capacity_bytes are required. Whether root_dir can be used
/// is checked on the node, before anything starts (launch/config/tier_dirs.hpp).
void read_secondary_tiers(reader& r, const YAML::Node& v, const std::string& p,
                          std::vector<secondary_tier_config>& out) {
  if (v.IsNull()) {
    out.clear();
    r.note(p, v);
    return;
  }
  if (!v.IsSequence()) {
    r.error(p, v, std::string("expected a list of tiers ({type: fs, root_dir, capacity_bytes}), ") +
                      "got " + kind_of(v));
    return;
  }
  r.note(p, v);
  out.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    secondary_tier_config t;
    const std::string tp = p + "[" + std::to_string(i) + "]";
    const YAML::Node item = v[i];
    bool has_root = false;
    bool has_capacity = false;
    r.map(item, tp,
          {{"type", [&](auto& x, auto& q) { r.choice(x, q, t.type, {"fs"}); }},
           {"root_dir",
            [&](auto& x, auto& q) {
              has_root = true;
              r.text(x, q, t.root_dir, true);
            }},
           {"capacity_bytes",
            [&](auto& x, auto& q) {
              has_capacity = true;
              r.number(x, q, t.capacity_bytes, 1, u64_max, true);
            }},
           {"n_read_threads", [&](auto& x, auto& q) { r.number(x, q, t.n_read_threads, 1, 1024); }},
           {"n_write_threads",
            [&](auto& x, auto& q) { r.number(x, q, t.n_write_threads, 1, 1024); }},
           {"max_pending_cascades",
            [&](auto& x, auto& q) { r.number(x, q, t.max_pending_cascades, 1, 1u << 24); }},
           {"direct_io", [&](auto& x, auto& q) { r.flag(x, q, t.direct_io); }},
           {"io_engine",
            [&](auto& x, auto& q) { r.choice(x, q, t.io_engine, {"auto", "io_uring", "threads"}); }},
           {"io_depth", [&](auto& x, auto& q) { r.number(x, q, t.io_depth, 1, 4096); }}});
    if (item.IsMap()) {
      if (!has_root) r.error(tp + ".root_dir", item, "missing: the directory of the tier's files");
      if (!has_capacity) {
        r.error(tp + ".capacity_bytes", item, "missing: the bytes the tier's files may take");
      }
    }
    out.push_back(std::move(t));
  }
}

void read_offload(reader& r, const YAML::Node& n, offload_section& o) {
  r.map(n, "offload",
        {{"enabled", [&](auto& v, auto& p) { r.flag(v, p, o.enabled); }},
         {"cpu_bytes_to_use",
          [&](auto& v, auto& p) { r.number(v, p, o.cpu_bytes_to_use, 1, u64_max, true); }},
         {"block_size", [&](auto& v, auto& p) { r.number(v, p, o.block_size, 0, 1u << 20); }},
         {"eviction_policy",
          [&](auto& v, auto& p) {
            r.choice(v, p, o.eviction_policy, {"lru", "arc"});
          }},
         {"store_threshold",
          [&](const YAML::Node& v, const std::string& p) {
            uint32_t t = o.store_threshold;
            const size_t before = r.errors.size();
            r.number(v, p, t, 0, u32_max);
            if (r.errors.size() != before) return;
            if (t == 1) {
              r.error(p, v, "1 is out of range: must be 0 (reuse filter off) or >= 2");
              return;
            }
            o.store_threshold = t;
          }},
         {"max_tracker_size",
          [&](auto& v, auto& p) {
            r.number(v, p, o.max_tracker_size, 1, scheduler::max_tracker_entries);
          }},
         {"secondary_tiers", [&](const YAML::Node& v, const std::string& p) {
            read_secondary_tiers(r, v, p, o.secondary_tiers);
          }}});
}

void read_runtime(reader& r, const YAML::Node& n, runtime_section& rt) {
  auto ms = [&](uint32_t& out, uint64_t min) {
    return [&out, min, &r](const YAML::Node& v, const std::string& p) {
      r.number(v, p, out, min, day_ms);
    };
  };
  r.map(n, "runtime",
        {{"host", [&](auto& v, auto& p) { r.text(v, p, rt.host, true); }},
         {"port", [&](auto& v, auto& p) { r.number(v, p, rt.port, 0, 65535); }},
         {"executor_port", [&](auto& v, auto& p) { r.number(v, p, rt.executor_port, 0, 65535); }},
         {"token", [&](auto& v, auto& p) { r.text(v, p, rt.token, false); }},
         {"instance", [&](auto& v, auto& p) { r.name(v, p, rt.instance, false); }},
         {"log_level",
          [&](auto& v, auto& p) {
            r.choice(v, p, rt.log_level, {"trace", "debug", "info", "warn", "error", "off"});
          }},
         {"heartbeat_ms", ms(rt.heartbeat_ms, 1)},
         {"connection_timeout_ms", ms(rt.connection_timeout_ms, 1)},
         {"register_timeout_ms", ms(rt.register_timeout_ms, 1)},
         {"ready_timeout_ms", ms(rt.ready_timeout_ms, 1)},
         {"step_timeout_ms", ms(rt.step_timeout_ms, 1)},
         {"stop_timeout_ms", ms(rt.stop_timeout_ms, 1)},
         {"job_timeout_ms", ms(rt.job_timeout_ms, 0)},
         {"job_timeout_steps",
          [&](auto& v, auto& p) { r.number(v, p, rt.job_timeout_steps, 0, u32_max); }},
         {"progress_interval_ms",
          [&](auto& v, auto& p) { r.number(v, p, rt.progress_interval_ms, 0, u32_max); }},
         {"faults",
          [&](const YAML::Node& v, const std::string& p) {
            if (v.IsNull()) {
              rt.faults.clear();
              r.note(p, v);
              return;
            }
            if (!v.IsSequence()) {
              r.error(p, v, std::string("expected a list of fault specs, got ") + kind_of(v));
              return;
            }
            r.note(p, v);
            rt.faults.clear();
            for (size_t i = 0; i < v.size(); ++i) {
              const std::string at = p + "[" + std::to_string(i) + "]";
              std::string spec;
              const size_t before = r.errors.size();
              r.text(v[i], at, spec, true);
              if (r.errors.size() != before) continue;
              if (auto f = parse_fault_option(spec); !f) {
                r.error(at, v[i], f.error().message());
                continue;
              }
              rt.faults.push_back(spec);
            }
          }},
         {"fault_seed", [&](auto& v, auto& p) { r.number(v, p, rt.fault_seed, 0, u64_max); }}});
}


void read_workload(reader& r, const YAML::Node& n, workload_section& w) {
  r.map(n, "workload",
        {{"requests", [&](auto& v, auto& p) { r.number(v, p, w.requests, 1, u32_max); }},
         {"arrival_rate", [&](auto& v, auto& p) { r.real(v, p, w.arrival_rate, 0, 1e6); }},
         {"prompt_tokens", [&](auto& v, auto& p) { r.range(v, p, w.prompt_tokens, 1); }},
         {"documents", [&](auto& v, auto& p) { r.number(v, p, w.documents, 1, 10'000'000); }},
         {"zipf", [&](auto& v, auto& p) { r.real(v, p, w.zipf, 0, 100); }},
         {"shared_prefix_tokens",
          [&](auto& v, auto& p) { r.range(v, p, w.shared_prefix_tokens, 0); }},
         {"multi_turn",
          [&](const YAML::Node& v, const std::string& p) {
            r.map(v, p,
                  {{"probability",
                    [&](auto& x, auto& q) { r.real(x, q, w.multi_turn.probability, 0, 1); }},
                   {"max_turns",
                    [&](auto& x, auto& q) { r.number(x, q, w.multi_turn.max_turns, 1, 1000); }}});
          }},
         {"output_tokens", [&](auto& v, auto& p) { r.range(v, p, w.output_tokens, 1); }},
         {"max_running", [&](auto& v, auto& p) { r.number(v, p, w.max_running, 1, u32_max); }},
         {"max_batched_tokens",
          [&](auto& v, auto& p) { r.number(v, p, w.max_batched_tokens, 1, u32_max); }},
         {"prefill_token_us", [&](auto& v, auto& p) { r.real(v, p, w.prefill_token_us, 0, 1e9); }},
         {"decode_step_us", [&](auto& v, auto& p) { r.real(v, p, w.decode_step_us, 0, 1e9); }},
         {"load_token_us", [&](auto& v, auto& p) { r.real(v, p, w.load_token_us, 0, 1e9); }},
         {"seed", [&](auto& v, auto& p) { r.number(v, p, w.seed, 0, u64_max); }},
         {"steps", [&](auto& v, auto& p) { r.number(v, p, w.steps, 1, u32_max); }},
         {"drain_steps", [&](auto& v, auto& p) { r.number(v, p, w.drain_steps, 0, u32_max); }}});
}

void read_observe(reader& r, const YAML::Node& n, observe_section& ob) {
  r.map(n, "observe",
        {{"metrics_port", [&](auto& v, auto& p) { r.number(v, p, ob.metrics_port, 0, 65535); }},
         {"kv_events", [&](const YAML::Node& v, const std::string& p) {
            r.map(v, p,
                  {{"endpoint",
                    [&](auto& x, auto& q) { r.text(x, q, ob.kv_events.endpoint, false); }},
                   {"replay_endpoint",
                    [&](auto& x, auto& q) { r.text(x, q, ob.kv_events.replay_endpoint, false); }},
                   {"topic", [&](auto& x, auto& q) { r.text(x, q, ob.kv_events.topic, false); }}});
          }},
         {"trace",
          [&](auto& v, auto& p) {
            r.choice(v, p, ob.trace, {"off", "messages", "jobs"});
          }},
         {"trace_dir", [&](auto& v, auto& p) { r.text(v, p, ob.trace_dir, false); }},
         {"record", [&](auto& v, auto& p) { r.flag(v, p, ob.record); }},
         {"record_dir", [&](auto& v, auto& p) { r.text(v, p, ob.record_dir, false); }}});
}

/// Puts `value` at `parts` in the tree, creating maps on the way. An error message otherwise.
std::string set_at(YAML::Node root, const std::vector<std::string>& parts,
                   const YAML::Node& value) {
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    const bool last = i + 1 == parts.size();
    const std::string so_far = render_path({parts.begin(), parts.begin() + i});
    if (cur.IsSequence()) {
      if (!is_index(part)) return so_far + " is a list: index it with a number";
      const size_t idx = std::stoul(part);
      if (idx > cur.size()) {
        return so_far + " has " + std::to_string(cur.size()) + " entries: index " + part +
               " is past its end";
      }
      if (idx == cur.size()) cur.push_back(YAML::Node(YAML::NodeType::Map));
      if (last) {
        cur[idx] = value;
        return "";
      }
      YAML::Node child = cur[idx];
      cur.reset(child);
      continue;
    }
    if (cur.IsScalar()) return so_far + " is a value, not a map";
    if (!cur.IsMap()) cur = YAML::Node(YAML::NodeType::Map);
    if (last) {
      cur[part] = value;
      return "";
    }
    YAML::Node child = cur[part];
    cur.reset(child);
  }
  return "";
}

}  // namespace

std::string config_error::to_string() const {
  return location + ": " + (key_path.empty() ? "" : key_path + ": ") + message;
}

std::span<const std::string_view> config_sections() {
  static constexpr std::string_view names[] = {"topology", "kv_cache", "offload",
                                               "runtime",  "workload", "observe"};
  return names;
}

loaded_config load_config(std::string_view text, std::string_view file_name,
                          std::span<const std::string> overrides, config_use use) {
  loaded_config out;
  const std::string file(file_name);
  if (text.size() > max_config_bytes) {
    out.errors.push_back({file, 0, "",
                          "holds " + std::to_string(text.size()) + " bytes: a config is at most " +
                              std::to_string(max_config_bytes) + " bytes (1 MiB)"});
    return out;
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    config_error err;
    err.line = e.mark.is_null() ? 0 : e.mark.line + 1;
    err.location = err.line ? file + ":" + std::to_string(err.line) : file;
    err.message = "not valid YAML: " + e.msg;
    out.errors.push_back(std::move(err));
    return out;
  }
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);

  // --set items, in order (a later one wins).
  std::vector<std::string> overridden;
  std::vector<config_error> set_errors;
  auto set_error = [&](std::string path, std::string message) {
    set_errors.push_back({"--set", 0, std::move(path), std::move(message)});
  };
  for (const auto& item : overrides) {
    const size_t eq = item.find('=');
    const auto parts = split_path(eq == std::string::npos ? item : item.substr(0, eq));
    if (eq == std::string::npos || parts.empty()) {
      set_error("", quoted(item) + " is not key.path=value");
      continue;
    }
    const std::string path = render_path(parts);
    YAML::Node value;
    try {
      value = YAML::Load(item.substr(eq + 1));
    } catch (const YAML::Exception&) {
      value = YAML::Node(item.substr(eq + 1));
    }
    if (!root.IsMap()) break;  // reported below
    if (auto problem = set_at(root, parts, value); !problem.empty()) {
      set_error(path, problem);
      continue;
    }
    overridden.push_back(path);
  }

  reader r(file, overridden);
  launch_config& c = out.config;
  if (!root.IsMap()) {
    r.error("", root,
            std::string("expected a map of sections (topology, kv_cache, offload, ") +
                "runtime, workload, observe), got " + kind_of(root));
  } else {
    r.map(root, "",
          {{"topology", [&](auto& v, auto&) { read_topology(r, v, c.topology); }},
           {"kv_cache", [&](auto& v, auto&) { read_kv_cache(r, v, c.kv_cache); }},
           {"offload", [&](auto& v, auto&) { read_offload(r, v, c.offload); }},
           {"runtime", [&](auto& v, auto&) { read_runtime(r, v, c.runtime); }},
           {"workload", [&](auto& v, auto&) { read_workload(r, v, c.workload); }},
           {"observe", [&](auto& v, auto&) { read_observe(r, v, c.observe); }}});
  }
  out.errors = std::move(r.errors);
  out.errors.insert(out.errors.end(), set_errors.begin(), set_errors.end());

  // Checks across keys; a key that already has an error is not blamed twice.
  std::set<std::string> blamed;
  for (const auto& e : out.errors) blamed.insert(e.key_path);
  for (auto& p : check_config(c, use)) {
    if (blamed.count(p.key_path)) continue;
    config_error e;
    if (auto it = r.seen.find(p.key_path); it != r.seen.end()) {
      e = it->second;
    } else {
      e = r.at(p.key_path, nullptr);
    }
    e.message = std::move(p.message);
    out.errors.push_back(std::move(e));
  }

  // File order: lines first, then defaults (file only), then --set.
  auto rank = [&](const config_error& e) {
    if (e.location == "--set") return 2;
    return e.line > 0 ? 0 : 1;
  };
  std::stable_sort(out.errors.begin(), out.errors.end(), [&](const auto& a, const auto& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return rank(a) == 0 && a.line < b.line;
  });
  if (!out.errors.empty()) return out;

  // Resolve what the defaults leave open, so the config printed is explicit.
  if (c.offload.block_size == 0) c.offload.block_size = c.kv_cache.gpu_block_size;
  if (c.topology.placement.empty()) {
    for (uint32_t node : rank_nodes(c.topology)) {
      c.topology.placement.push_back(c.topology.nodes[node].name);
    }
  }
  return out;
}

}  // namespace kvc::launch
