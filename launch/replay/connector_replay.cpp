// `kvconnect replay --connector`: a vLLM R1 connector trace through kvconnect's planner (see
// connector_replay.hpp and docs/planner.md).
#include "launch/replay/connector_replay.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/scheduler/manager_config.hpp"
#include "actors/scheduler/planner.hpp"
#include "actors/scheduler/planner_config.hpp"
#include "proto/block_key.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/kv_event.hpp"

namespace kvc::launch {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using scheduler::planner;

status bad(std::string message) {
  return make_error(errc::invalid_argument, std::move(message));
}

// --- typed field access: every failure names the field -----------------------------------------

bool is_uint(const json& v) {
  return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
}

status field(const json& obj, const char* name, const json*& out) {
  auto it = obj.find(name);
  if (it == obj.end()) return bad(std::string{"missing field \""} + name + "\"");
  out = &*it;
  return {};
}

status get_u64(const json& obj, const char* name, uint64_t& v, uint64_t max = UINT64_MAX) {
  const json* f = nullptr;
  if (auto s = field(obj, name, f); !s) return s;
  if (!is_uint(*f) || f->get<uint64_t>() > max)
    return bad(std::string{"\""} + name + "\" must be an integer in [0, " + std::to_string(max) +
               "]");
  v = f->get<uint64_t>();
  return {};
}

status get_u32(const json& obj, const char* name, uint32_t& v) {
  uint64_t w = 0;
  if (auto s = get_u64(obj, name, w, UINT32_MAX); !s) return s;
  v = static_cast<uint32_t>(w);
  return {};
}

status get_bool(const json& obj, const char* name, bool& v) {
  const json* f = nullptr;
  if (auto s = field(obj, name, f); !s) return s;
  if (!f->is_boolean()) return bad(std::string{"\""} + name + "\" must be a boolean");
  v = f->get<bool>();
  return {};
}

status get_string(const json& obj, const char* name, std::string& v) {
  const json* f = nullptr;
  if (auto s = field(obj, name, f); !s) return s;
  if (!f->is_string()) return bad(std::string{"\""} + name + "\" must be a string");
  v = f->get<std::string>();
  return {};
}

status get_array(const json& obj, const char* name, const json*& v) {
  if (auto s = field(obj, name, v); !s) return s;
  if (!v->is_array()) return bad(std::string{"\""} + name + "\" must be an array");
  return {};
}

/// Block hashes (ints below 2^63) as block keys.
status get_hashes(const json& obj, const char* name, std::vector<block_key>& out) {
  const json* a = nullptr;
  if (auto s = get_array(obj, name, a); !s) return s;
  for (const json& h : *a) {
    if (!is_uint(h)) return bad(std::string{"\""} + name + "\" must hold non-negative integers");
    out.push_back(block_key::from_index(h.get<uint64_t>()));
  }
  return {};
}

status get_strings(const json& obj, const char* name, std::vector<std::string>& out) {
  const json* a = nullptr;
  if (auto s = get_array(obj, name, a); !s) return s;
  for (const json& x : *a) {
    if (!x.is_string()) return bad(std::string{"\""} + name + "\" must hold strings");
    out.push_back(x.get<std::string>());
  }
  return {};
}

/// A per-KV-cache-group list (`[[...]]`); kvconnect's planner has one group.
status one_group(const json& v, const char* name, const json*& group) {
  if (!v.is_array() || v.size() != 1 || !v[0].is_array())
    return bad(std::string{"\""} + name + "\" must be one KV-cache group: [[...]]");
  group = &v[0];
  return {};
}

status get_block_ids(const json& v, const char* name, std::vector<gpu_block>& out) {
  const json* g = nullptr;
  if (auto s = one_group(v, name, g); !s) return s;
  for (const json& b : *g) {
    if (!is_uint(b) || b.get<uint64_t>() > UINT32_MAX)
      return bad(std::string{"\""} + name + "\" must hold block ids");
    out.push_back(static_cast<gpu_block>(b.get<uint64_t>()));
  }
  return {};
}

// --- answers ---------------------------------------------------------------------------------

ojson keys_json(std::span<const block_key> keys) {
  ojson a = ojson::array();
  for (const auto& k : keys) a.push_back(k.to_index());
  return a;
}

template <class List>
ojson ints_json(const List& v) {
  ojson a = ojson::array();
  for (auto x : v) a.push_back(x);
  return a;
}

/// One replay: the planner (none before the first config), the request table, the jobs seen.
class connector_replay {
 public:
  /// The answer for one input line ("" when the line is input-only), or an error.
  result<std::string> answer(std::string_view line) {
    json obj = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded())
      return bad("invalid JSON: " + std::string(line.substr(0, 80)) +
                 (line.size() > 80 ? "..." : ""));
    if (!obj.is_object()) return bad("a line must be a JSON object");
    std::string op;
    if (auto s = get_string(obj, "op", op); !s) return s;
    op_ = op;
    // What is checked is never read: dropped before the op looks at the line.
    if (op == "state") return std::string{};
    obj.erase("out");
    obj.erase("calls");
    if (op == "config") return with_answer(config(obj));
    if (op == "step" || op == "end") return std::string{};
    if (!planner_) return make_error(errc::precondition_failed, "no \"config\" line yet");
    if (op == "add_request") return with_answer(add_request(obj));
    if (op == "append_tokens") return with_answer(append_tokens(obj));
    ojson out;
    status s;
    if (op == "get_num_new_matched_tokens") {
      s = get_num_new_matched_tokens(obj, out);
    } else if (op == "update_state_after_alloc") {
      s = update_state_after_alloc(obj, out);
    } else if (op == "build_connector_meta") {
      s = build_connector_meta(obj, out);
    } else if (op == "request_finished") {
      s = request_finished(obj, out);
    } else if (op == "update_connector_output") {
      s = update_connector_output(obj, out);
    } else if (op == "take_events") {
      s = take_events(out);
    } else {
      return bad("unknown op \"" + op + "\"");
    }
    if (!s) return s;
    ojson line_out;
    line_out["op"] = op;
    line_out["out"] = std::move(out);
    return line_out.dump();
  }

  /// The op of the last line parsed ("" if none could be read).
  const std::string& op() const noexcept { return op_; }
  void forget_op() { op_.clear(); }

 private:
  struct request {
    std::vector<block_key> hashes;
    uint32_t num_tokens = 0;
    bool remote_decode = false;
  };
  using request_table = std::unordered_map<std::string, request>;  // node-based: stable ids

  static result<std::string> with_answer(status s) {
    if (!s) return s;
    return std::string{};
  }

  scheduler::request_view view(const request_table::value_type& r) const {
    return {r.first, r.second.hashes, r.second.num_tokens, r.second.remote_decode};
  }

  result<request_table::iterator> known(const json& obj) {
    std::string id;
    if (auto s = get_string(obj, "req", id); !s) return s;
    auto it = reqs_.find(id);
    if (it == reqs_.end()) return make_error(errc::not_found, "unknown request \"" + id + "\"");
    return it;
  }

  /// The line's num_tokens must match the table (the trace's cross-check).
  static status same_tokens(const json& obj, const request_table::value_type& r) {
    uint32_t n = 0;
    if (auto s = get_u32(obj, "num_tokens", n); !s) return s;
    if (n != r.second.num_tokens)
      return bad("request \"" + r.first + "\" has " + std::to_string(r.second.num_tokens) +
                 " tokens, the line says " + std::to_string(n));
    return {};
  }

  status check_hashes(const std::string& id, const request& r) const {
    if (r.hashes.size() != r.num_tokens / hash_block_size_)
      return bad("request \"" + id + "\": " + std::to_string(r.hashes.size()) +
                 " block hashes for " + std::to_string(r.num_tokens) + " tokens (hash block " +
                 std::to_string(hash_block_size_) + ")");
    return {};
  }

  status config(const json& obj) {
    scheduler::planner_config cfg;
    uint32_t factor = 0;
    std::string policy;
    bool events = true;
    for (auto s : {get_u32(obj, "gpu_block_size", cfg.gpu_block_size),
                   get_u32(obj, "offloaded_block_size", cfg.offloaded_block_size),
                   get_u32(obj, "hash_block_size", cfg.hash_block_size),
                   get_u32(obj, "block_size_factor", factor),
                   get_u32(obj, "num_cpu_blocks", cfg.manager.capacity),
                   get_string(obj, "eviction_policy", policy),
                   get_u32(obj, "store_threshold", cfg.manager.store_threshold),
                   get_bool(obj, "enable_prefix_caching", cfg.enable_prefix_caching),
                   get_bool(obj, "enable_kv_cache_events", events)}) {
      if (!s) return s;
    }
    if (uint64_t{cfg.gpu_block_size} * factor != cfg.offloaded_block_size)
      return bad("offloaded_block_size " + std::to_string(cfg.offloaded_block_size) +
                 " is not gpu_block_size x block_size_factor");
    if (auto it = obj.find("max_tracker_size"); it != obj.end() && !it->is_null()) {
      if (auto s = get_u32(obj, "max_tracker_size", cfg.manager.max_tracker_size); !s) return s;
    }
    auto parsed = scheduler::parse_eviction_policy(policy);
    if (!parsed) return parsed.error();
    cfg.manager.policy = *parsed;
    cfg.manager.enable_events = events;
    auto made = planner::create(cfg);
    if (!made) return made.error();
    planner_ = std::move(*made);
    hash_block_size_ = cfg.hash_block_size;
    reqs_.clear();
    store_jobs_.clear();
    return {};
  }

  status add_request(const json& obj) {
    std::string id;
    request r;
    if (auto s = get_string(obj, "req", id); !s) return s;
    if (reqs_.contains(id)) return bad("request \"" + id + "\" already exists");
    if (auto s = get_u32(obj, "num_tokens", r.num_tokens); !s) return s;
    if (auto s = get_hashes(obj, "block_hashes", r.hashes); !s) return s;
    const json* params = nullptr;
    if (auto s = field(obj, "kv_transfer_params", params); !s) return s;
    if (params->is_object()) {
      if (auto it = params->find("do_remote_decode"); it != params->end()) {
        if (!it->is_boolean()) return bad("\"do_remote_decode\" must be a boolean");
        r.remote_decode = it->get<bool>();
      }
    } else if (!params->is_null()) {
      return bad("\"kv_transfer_params\" must be null or an object");
    }
    if (auto s = check_hashes(id, r); !s) return s;
    reqs_.emplace(std::move(id), std::move(r));
    return {};
  }

  status append_tokens(const json& obj) {
    auto it = known(obj);
    if (!it) return it.error();
    request next = (*it)->second;
    if (auto s = get_u32(obj, "num_tokens", next.num_tokens); !s) return s;
    if (auto s = get_hashes(obj, "new_block_hashes", next.hashes); !s) return s;
    if (auto s = check_hashes((*it)->first, next); !s) return s;
    (*it)->second = std::move(next);
    return {};
  }

  status get_num_new_matched_tokens(const json& obj, ojson& out) {
    auto it = known(obj);
    if (!it) return it.error();
    uint32_t computed = 0;
    if (auto s = same_tokens(obj, **it); !s) return s;
    if (auto s = get_u32(obj, "num_computed_tokens", computed); !s) return s;
    const auto m = planner_->get_num_new_matched_tokens(view(**it), computed);
    out = ojson::array({m.tokens ? ojson(*m.tokens) : ojson(nullptr), m.is_async});
    return {};
  }

  ojson job_json(const transfer_job& j) const {
    ojson o;
    o["req"] = j.request_id;
    o["keys"] = keys_json(planner_->job_keys(j.id));  // diagnostic
    o["cpu"] = ints_json(j.slots);
    o["gpu"] = ints_json(j.gpu_blocks);
    o["group_sizes"] = ints_json(j.group_sizes);
    o["block_indices"] = ints_json(j.block_indices);
    return o;
  }

  status update_state_after_alloc(const json& obj, ojson& out) {
    auto it = known(obj);
    if (!it) return it.error();
    uint32_t external = 0;
    if (auto s = get_u32(obj, "num_external_tokens", external); !s) return s;
    const json* blocks = nullptr;
    if (auto s = field(obj, "blocks", blocks); !s) return s;
    const json* group = nullptr;
    if (auto s = one_group(*blocks, "blocks", group); !s) return s;
    ids_.clear();
    hashed_.clear();
    for (const json& b : *group) {
      if (!b.is_array() || b.size() != 2 || !is_uint(b[0]) || b[0].get<uint64_t>() > UINT32_MAX ||
          !is_uint(b[1]) || b[1].get<uint64_t>() > 1)
        return bad("\"blocks\" entries must be [block_id, hashed (0 or 1)]");
      ids_.push_back(static_cast<gpu_block>(b[0].get<uint64_t>()));
      hashed_.push_back(static_cast<uint8_t>(b[1].get<uint64_t>()));
    }
    if (auto s = planner_->update_state_after_alloc(view(**it), {ids_, hashed_}, external); !s)
      return s;
    out = nullptr;
    const auto pending = planner_->pending_loads();
    if (external > 0 && !pending.empty() && pending.back().request_id == (*it)->first)
      out = job_json(pending.back());
    return {};
  }

  /// One scheduled request of build_connector_meta; its block ids are kept in `ids`.
  status scheduled(const json& s, bool cached, std::vector<gpu_block>& ids,
                   scheduler::scheduled_request& out) {
    auto it = known(s);
    if (!it) return it.error();
    if (auto st = same_tokens(s, **it); !st) return st;
    if (auto st = get_u32(s, "num_computed_tokens", out.num_computed); !st) return st;
    if (auto st = get_u32(s, "num_scheduled_tokens", out.num_scheduled); !st) return st;
    const char* name = cached ? "new_block_ids" : "block_ids";
    const json* blocks = nullptr;
    if (auto st = field(s, name, blocks); !st) return st;
    if (cached) {
      if (auto st = get_bool(s, "resumed", out.resumed); !st) return st;
    }
    if (!(cached && blocks->is_null())) {
      if (auto st = get_block_ids(*blocks, name, ids); !st) return st;
    }
    out.req = view(**it);
    return {};
  }

  status build_connector_meta(const json& obj, ojson& out) {
    uint64_t step = 0;
    if (auto s = get_u64(obj, "step", step); !s) return s;
    const json* fresh = nullptr;
    const json* cached = nullptr;
    if (auto s = get_array(obj, "new", fresh); !s) return s;
    if (auto s = get_array(obj, "cached", cached); !s) return s;
    std::vector<std::string> preempted_ids;
    if (auto s = get_strings(obj, "preempted", preempted_ids); !s) return s;
    // The block-id lists must not move while the spans point into them.
    std::vector<std::vector<gpu_block>> ids(fresh->size() + cached->size());
    std::vector<scheduler::scheduled_request> new_reqs(fresh->size());
    std::vector<scheduler::scheduled_request> cached_reqs(cached->size());
    size_t k = 0;
    for (size_t i = 0; i < fresh->size(); ++i, ++k) {
      if (auto s = scheduled((*fresh)[i], false, ids[k], new_reqs[i]); !s)
        return bad("new[" + std::to_string(i) + "]: " + s.message());
      new_reqs[i].block_ids = ids[k];
    }
    for (size_t i = 0; i < cached->size(); ++i, ++k) {
      if (auto s = scheduled((*cached)[i], true, ids[k], cached_reqs[i]); !s)
        return bad("cached[" + std::to_string(i) + "]: " + s.message());
      cached_reqs[i].block_ids = ids[k];
    }
    std::vector<std::string_view> preempted(preempted_ids.begin(), preempted_ids.end());
    auto meta = planner_->build_connector_meta({step, new_reqs, cached_reqs, preempted});
    if (!meta) return meta.error();

    out["load"] = ojson::array();
    out["store"] = ojson::array();
    for (const auto& j : meta->loads) out["load"].push_back(job_json(j));
    for (const auto& j : meta->stores) {
      out["store"].push_back(job_json(j));
      store_jobs_.insert(j.id);
    }
    out["flush"] = ojson::array();
    for (const auto& r : meta->flush_requests) out["flush"].push_back(r);

    // The worker's part: the flushed stores complete now (R1 completes them inside the call).
    connector_output flushed{step, {}};
    for (job_id id : meta->flush) {
      if (store_jobs_.erase(id) > 0) flushed.jobs.push_back({id, transfer_kind::store, true});
    }
    if (!flushed.jobs.empty()) {
      if (auto s = planner_->update_connector_output(flushed); !s) return s;
    }
    return {};
  }

  status request_finished(const json& obj, ojson& out) {
    auto it = known(obj);
    if (!it) return it.error();
    const bool delay = planner_->request_finished((*it)->first);
    reqs_.erase(*it);
    out = ojson::array({delay, nullptr});
    return {};
  }

  status update_connector_output(const json& obj, ojson& out) {
    std::vector<std::string> sending;
    std::vector<std::string> recving;
    if (auto s = get_strings(obj, "finished_sending", sending); !s) return s;
    if (auto s = get_strings(obj, "finished_recving", recving); !s) return s;
    std::vector<std::string_view> sv(sending.begin(), sending.end());
    std::vector<std::string_view> rv(recving.begin(), recving.end());
    if (auto s = planner_->update_connector_output(scheduler::request_output{sv, rv}); !s) return s;
    (void)planner_->take_request_completions();  // the trace's lists are the engine's word
    out = nullptr;
    return {};
  }

  status take_events(ojson& out) {
    out = ojson::array();
    for (auto& ev : planner_->take_events()) {
      ojson e;
      if (ev.kind == kv_event_kind::stored) {
        // R1 completes a set: the trace sorts these hashes, so do we.
        std::sort(ev.keys.begin(), ev.keys.end(), [](const block_key& a, const block_key& b) {
          return a.to_index() < b.to_index();
        });
        e["type"] = "BlockStored";
        e["block_hashes"] = keys_json(ev.keys);
        e["parent_block_hash"] = nullptr;
        e["token_ids"] = ojson::array();
        e["block_size"] = 0;
        e["lora_id"] = nullptr;
        e["medium"] = std::string(to_string(ev.where));
        e["lora_name"] = nullptr;
        e["extra_keys"] = nullptr;
        e["group_idx"] = nullptr;
      } else {
        e["type"] = "BlockRemoved";
        e["block_hashes"] = keys_json(ev.keys);
        e["medium"] = std::string(to_string(ev.where));
        e["group_idx"] = nullptr;
      }
      out.push_back(std::move(e));
    }
    return {};
  }

  std::unique_ptr<planner> planner_;
  uint32_t hash_block_size_ = 1;
  request_table reqs_;
  std::unordered_set<job_id> store_jobs_;  ///< store jobs planned, not yet flushed
  std::string op_;
  std::vector<gpu_block> ids_;
  std::vector<uint8_t> hashed_;
};

std::string error_line(const std::string& op, size_t line_no, const std::string& message) {
  ojson e;
  if (!op.empty()) e["op"] = op;
  e["error"] = "line " + std::to_string(line_no) + ": " + message;
  // The message may quote a malformed line: invalid UTF-8 is replaced, not thrown on.
  return e.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

bool replay_connector_trace(byte_source& in, std::ostream& out) {
  connector_replay session;
  line_reader reader{in};
  bool ok = true;
  std::string line;
  status error;
  for (size_t line_no = 1;; ++line_no) {
    const auto k = reader.next(line, error);
    if (k == line_reader::kind::end) break;
    if (k == line_reader::kind::failed) {
      out << error_line("", line_no, "read failed: " + error.to_string()) << '\n';
      ok = false;
      break;
    }
    if (k == line_reader::kind::too_long) {
      out << error_line("", line_no,
                        "longer than " + std::to_string(max_line_bytes) + " bytes; skipped")
          << '\n';
      ok = false;
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    session.forget_op();
    auto answer = session.answer(line);
    if (!answer) {
      out << error_line(session.op(), line_no, answer.error().to_string()) << '\n';
      ok = false;
    } else if (!answer->empty()) {
      out << *answer << '\n';
    }
  }
  out.flush();
  return ok;
}

}  // namespace kvc::launch
