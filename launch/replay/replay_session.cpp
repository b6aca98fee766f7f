#include "launch/replay/replay_session.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/scheduler/manager_config.hpp"
#include "actors/scheduler/offload_manager.hpp"
#include "proto/block_key.hpp"
#include "proto/kv_event.hpp"
#include "proto/status.hpp"

namespace kvc::launch {
namespace {

using nlohmann::json;
using scheduler::offload_manager;

status bad(std::string message) { return make_error(errc::invalid_argument, std::move(message)); }

bool is_uint(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

void append_keys(std::string& out, std::span<const block_key> keys) {
  out += '[';
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(keys[i].to_index());
  }
  out += ']';
}

void append_slots(std::string& out, std::span<const cpu_slot> slots) {
  out += '[';
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(slots[i]);
  }
  out += ']';
}

/// One replay: the current manager (none before the first config) and reusable buffers.
class replay_session {
 public:
  /// The answer line for one input line (without the newline). Sets `failed` on an error.
  std::string answer(std::string_view line, bool& failed) {
    std::string out;
    if (status st = run(line, out); !st.ok()) {
      failed = true;
      return error_line(st.to_string());
    }
    return out;
  }

  /// {"error": message}: at most 300 bytes of it (a message may quote the input), invalid
  /// UTF-8 replaced, never thrown on.
  static std::string error_line(std::string message) {
    if (message.size() > 300) message = message.substr(0, 300) + "...";
    return "{\"error\":" + json(message).dump(-1, ' ', false, json::error_handler_t::replace) +
           "}";
  }

 private:
  struct op_fields {
    std::vector<std::string_view> required;
    std::vector<std::string_view> optional;
  };

  static const op_fields* fields_of(std::string_view op) {
    static const op_fields config{{"capacity", "policy"}, {"max_tracker_size", "store_threshold"}};
    static const op_fields with_keys{{"keys"}, {}};
    static const op_fields store_done{{"keys", "success"}, {}};
    static const op_fields none{{}, {}};
    if (op == "config") return &config;
    if (op == "lookup" || op == "touch" || op == "prepare_load" || op == "complete_load" ||
        op == "prepare_store")
      return &with_keys;
    if (op == "complete_store") return &store_done;
    if (op == "take_events" || op == "reset") return &none;
    return nullptr;
  }

  status run(std::string_view line, std::string& out) {
    json obj;
    try {
      obj = json::parse(line);
    } catch (const json::exception& e) {
      return bad(std::string{"invalid JSON: "} + e.what());
    }
    if (!obj.is_object()) return bad("a line must be a JSON object");
    auto op_it = obj.find("op");
    if (op_it == obj.end() || !op_it->is_string()) return bad("missing string field \"op\"");
    const std::string op = op_it->get<std::string>();
    const op_fields* fields = fields_of(op);
    if (!fields) return bad("unknown op \"" + op + "\"");
    if (op != "config" && !manager_)
      return make_error(errc::precondition_failed,
                        "no manager yet: the first op must be \"config\"");
    for (const auto& item : obj.items()) {  // sorted by name, like the Python reference
      const std::string& name = item.key();  // (clang 14 cannot capture a structured binding)
      if (name == "op") continue;
      auto known = [&](const std::vector<std::string_view>& v) {
        return std::find(v.begin(), v.end(), name) != v.end();
      };
      if (!known(fields->required) && !known(fields->optional))
        return bad("op \"" + op + "\": unknown field \"" + name + "\"");
    }
    for (std::string_view name : fields->required)
      if (!obj.contains(name))
        return bad("op \"" + op + "\": missing field \"" + std::string{name} + "\"");

    if (op == "config") return config(obj, out);
    if (op == "take_events") return take_events(out);
    if (op == "reset") {
      manager_->reset();
      out = "{\"ok\":true}";
      return status::success();
    }
    if (status st = parse_keys(op, obj["keys"]); !st.ok()) return st;
    offload_manager& m = *manager_;
    if (op == "lookup") {
      out = "{\"hits\":[";
      for (size_t i = 0; i < keys_.size(); ++i) {
        if (i) out += ',';
        out += m.lookup(keys_[i]) ? "true" : "false";
      }
      out += "]}";
    } else if (op == "touch") {
      m.touch(keys_);
      out = "{\"ok\":true}";
    } else if (op == "prepare_load") {
      auto slots = m.prepare_load(keys_);
      if (!slots) return slots.error();
      out = "{\"block_ids\":";
      append_slots(out, *slots);
      out += '}';
    } else if (op == "complete_load") {
      if (status st = m.complete_load(keys_); !st.ok()) return st;
      out = "{\"ok\":true}";
    } else if (op == "prepare_store") {
      auto plan = m.prepare_store(keys_);
      if (!plan) {
        out = "{\"result\":null}";
        return status::success();
      }
      out = "{\"stored\":";
      append_keys(out, plan->keys);
      out += ",\"block_ids\":";
      append_slots(out, plan->slots);
      out += ",\"evicted\":";
      append_keys(out, plan->evicted);
      out += '}';
    } else {  // complete_store
      const json& success = obj["success"];
      if (!success.is_boolean())
        return bad("op \"" + op + "\": \"success\" must be a boolean");
      m.complete_store(keys_, success.get<bool>());
      out = "{\"ok\":true}";
    }
    return status::success();
  }

  status parse_keys(const std::string& op, const json& v) {
    keys_.clear();
    bool ok = v.is_array();
    if (ok) {
      for (const json& k : v) {
        if (!is_uint(k)) {
          ok = false;
          break;
        }
        keys_.push_back(block_key::from_index(k.get<uint64_t>()));
      }
    }
    if (!ok) return bad("op \"" + op + "\": \"keys\" must be an array of non-negative integers");
    return status::success();
  }

  static status get_u32(const json& obj, const char* name, uint32_t& value) {
    auto it = obj.find(name);
    if (it == obj.end()) return status::success();
    if (!is_uint(*it))
      return bad(std::string{"op \"config\": \""} + name + "\" must be a non-negative integer");
    const uint64_t v = it->get<uint64_t>();
    if (v > UINT32_MAX) {
      return bad(std::string{"op \"config\": \""} + name + "\" must be at most 4294967295");
    }
    value = static_cast<uint32_t>(v);
    return status::success();
  }

  status config(const json& obj, std::string& out) {
    scheduler::manager_config cfg;
    if (status st = get_u32(obj, "capacity", cfg.capacity); !st.ok()) return st;
    const json& policy = obj["policy"];
    if (!policy.is_string()) return bad("op \"config\": \"policy\" must be a string");
    if (status st = get_u32(obj, "store_threshold", cfg.store_threshold); !st.ok()) return st;
    if (status st = get_u32(obj, "max_tracker_size", cfg.max_tracker_size); !st.ok()) return st;
    auto parsed = scheduler::parse_eviction_policy(policy.get<std::string>());
    if (!parsed) return parsed.error();
    cfg.policy = *parsed;
    auto m = offload_manager::create(cfg);
    if (!m) return m.error();
    manager_ = std::move(*m);
    out = "{\"ok\":true}";
    return status::success();
  }

  status take_events(std::string& out) {
    out = "{\"events\":[";
    bool first = true;
    manager_->drain_events([&](kv_event_kind kind, std::span<const block_key> keys) {
      if (!first) out += ',';
      first = false;
      out += "{\"kind\":\"";
      out += to_string(kind);
      out += "\",\"keys\":";
      append_keys(out, keys);
      out += '}';
    });
    out += "]}";
    return status::success();
  }

  std::unique_ptr<offload_manager> manager_;
  std::vector<block_key> keys_;
};

}  // namespace

bool replay_manager_ops(byte_source& in, std::ostream& out) {
  replay_session session;
  bool failed = false;
  line_reader reader{in};
  std::string line;
  status read_error;
  for (size_t line_no = 1;; ++line_no) {
    const auto got = reader.next(line, read_error);
    if (got == line_reader::kind::end) break;
    if (got == line_reader::kind::failed) {
      out << replay_session::error_line("line " + std::to_string(line_no) + ": " +
                                        read_error.to_string())
          << '\n';
      failed = true;
      break;
    }
    if (got == line_reader::kind::too_long) {
      out << replay_session::error_line("line " + std::to_string(line_no) + ": longer than " +
                                        std::to_string(max_line_bytes) + " bytes; skipped")
          << '\n';
      failed = true;
      continue;
    }
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    out << session.answer(line, failed) << '\n';
  }
  out.flush();
  return !failed;
}

}  // namespace kvc::launch
