#include "launch/roles/child_events.hpp"

#include <type_traits>

namespace kvc::launch {

namespace {

using nlohmann::json;

/// Reads the fields of one event's line; the first problem is kept and later reads give 0s.
class field_reader {
 public:
  field_reader(const json& line, std::string_view event) : line_(line), event_(event) {}

  bool has(const char* key) const { return line_.contains(key); }

  uint64_t u64(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number_unsigned()) return wrong(key, "an unsigned number"), 0;
    return v->get<uint64_t>();
  }
  uint32_t u32(const char* key) {
    const uint64_t v = u64(key);
    if (v > UINT32_MAX) return wrong(key, "a 32-bit unsigned number"), 0;
    return static_cast<uint32_t>(v);
  }
  int64_t i64(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return 0;
    if (!v->is_number_integer()) return wrong(key, "an integer"), 0;
    return v->get<int64_t>();
  }
  bool boolean(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) return wrong(key, "true or false"), false;
    return v->get<bool>();
  }
  std::string str(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return {};
    if (!v->is_string()) return wrong(key, "a string"), std::string{};
    return v->get<std::string>();
  }
  std::vector<std::string> strings(const char* key) {
    const json* v = find(key);
    if (v == nullptr) return {};
    std::vector<std::string> out;
    if (!v->is_array()) return wrong(key, "a list of strings"), out;
    for (const json& s : *v) {
      if (!s.is_string()) return wrong(key, "a list of strings"), std::vector<std::string>{};
      out.push_back(s.get<std::string>());
    }
    return out;
  }
  /// {"kind": n, ...}.
  fired_faults counts(const char* key) {
    const json* v = find(key);
    fired_faults out;
    if (v == nullptr) return out;
    if (!v->is_object()) return wrong(key, "an object of counts"), out;
    for (const auto& [kind, n] : v->items()) {
      if (!n.is_number_unsigned()) return wrong(key, "an object of counts"), fired_faults{};
      out[kind] = n.get<uint64_t>();
    }
    return out;
  }
  /// [[step, ns], ...].
  std::vector<std::pair<step_id, uint64_t>> step_times(const char* key) {
    const json* v = find(key);
    std::vector<std::pair<step_id, uint64_t>> out;
    if (v == nullptr) return out;
    const char* what = "a list of [step, ns] pairs";
    if (!v->is_array()) return wrong(key, what), out;
    for (const json& s : *v) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_unsigned() ||
          !s[1].is_number_unsigned()) {
        return wrong(key, what), decltype(out){};
      }
      out.emplace_back(s[0].get<step_id>(), s[1].get<uint64_t>());
    }
    return out;
  }

  const status& error() const { return error_; }

 private:
  const json* find(const char* key) {
    if (!error_) return nullptr;
    auto it = line_.find(key);
    if (it == line_.end()) {
      error_ = make_error(errc::invalid_argument, prefix() + "\"" + key + "\" is missing");
      return nullptr;
    }
    return &*it;
  }
  void wrong(const char* key, const char* what) {
    error_ = make_error(errc::invalid_argument, prefix() + "\"" + key + "\" is not " + what);
  }
  std::string prefix() const { return "event \"" + std::string{event_} + "\": "; }

  const json& line_;
  std::string_view event_;
  status error_;
};

fault_outcome outcome_of(field_reader& r) {
  fault_outcome o;
  o.seed = r.u64("seed");
  const fired_faults fired = r.counts("fired");
  for (size_t k = 0; k < fault_kind_count; ++k) {
    auto it = fired.find(std::string{to_string(static_cast<fault_kind>(k))});
    if (it != fired.end()) o.fired[k] = it->second;
  }
  o.jobs_failed = r.u64("jobs_failed");
  o.jobs_recovered = r.u64("jobs_recovered");
  o.requests_recomputed = r.u64("requests_recomputed");
  o.late_reports_dropped = r.u64("late_reports_dropped");
  o.duplicates_dropped = r.u64("duplicates_dropped");
  o.hung_requests = r.u64("hung_requests");
  o.leaked_slots = r.u64("leaked_slots");
  o.pending_jobs = r.u64("pending_jobs");
  o.load_mismatches = r.u64("load_mismatches");
  o.double_completions = r.u64("double_completions");
  return o;
}

/// The event named `name` read from `j`; nullopt when no event has that name.
std::optional<child_event> read_event(const std::string& name, const json& j, field_reader& r) {
  if (name == "listening") {
    listening_event e;
    e.port = r.u64("port");
    e.segment = r.str("segment");
    e.layout_checksum = r.u64("layout_checksum");
    e.world_size = r.u64("world_size");
    e.executor = r.str("executor");
    e.pid = r.i64("pid");
    e.metrics_port = r.u64("metrics_port");
    e.kv_events_endpoint = r.str("kv_events_endpoint");
    e.kv_events_replay_endpoint = r.str("kv_events_replay_endpoint");
    return e;
  }
  if (name == "ready") return ready_event{r.u64("world_size")};
  if (name == "progress") return progress_event{r.u64("step"), j};
  if (name == "smoke") {
    return smoke_event{r.u64("steps"),         r.u64("jobs_ok"),       r.u64("jobs_failed"),
                       r.u64("rounds_interrupted"), r.u64("slots_checked"), r.u64("bytes")};
  }
  if (name == "sim") {
    (void)r.boolean("ok");
    return sim_event{j};
  }
  if (name == "finished") return finished_event{j};
  if (name == "rank_lost") return rank_lost_event{r.u32("rank"), r.u32("incarnation")};
  if (name == "fault_report") return fault_report_event{outcome_of(r)};
  if (name == "stopped") {
    stopped_event e;
    if (r.has("workers")) e.workers = r.u64("workers");
    if (r.has("rank")) e.rank = r.u32("rank");
    if (r.has("fired")) e.fired = r.counts("fired");
    return e;
  }
  if (name == "registered") {
    return registered_event{r.u32("rank"), r.u32("incarnation"), r.i64("pid")};
  }
  if (name == "runner") {
    runner_event e;
    e.rank = r.u32("rank");
    e.steps = r.u64("steps");
    e.tokens_written = r.u64("tokens_written");
    e.loads_verified = r.u64("loads_verified");
    e.load_mismatches = r.u64("load_mismatches");
    e.blocks_load_failed = r.u64("blocks_load_failed");
    e.step_errors = r.u64("step_errors");
    e.steps_connector_only = r.u64("steps_connector_only");
    e.steps_skipped = r.u64("steps_skipped");
    e.connector_ns = r.u64("connector_ns");
    e.mismatches = r.strings("mismatches");
    return e;
  }
  if (name == "connector_steps") {
    return connector_steps_event{r.u32("rank"), r.step_times("ns")};
  }
  if (name == "device_lost") {
    return device_lost_event{r.u32("rank"), r.u32("incarnation"), r.str("detail"),
                             r.counts("fired")};
  }
  return std::nullopt;
}

}  // namespace

std::string_view event_name(const child_event& event) {
  return std::visit(
      overloaded{[](const listening_event&) { return "listening"; },
                 [](const ready_event&) { return "ready"; },
                 [](const progress_event&) { return "progress"; },
                 [](const smoke_event&) { return "smoke"; },
                 [](const sim_event&) { return "sim"; },
                 [](const finished_event&) { return "finished"; },
                 [](const rank_lost_event&) { return "rank_lost"; },
                 [](const fault_report_event&) { return "fault_report"; },
                 [](const stopped_event&) { return "stopped"; },
                 [](const registered_event&) { return "registered"; },
                 [](const runner_event&) { return "runner"; },
                 [](const connector_steps_event&) { return "connector_steps"; },
                 [](const device_lost_event&) { return "device_lost"; }},
      event);
}

json to_json(const child_event& event) {
  json j = std::visit(
      overloaded{
          [](const listening_event& e) -> json {
            return {{"port", e.port},
                    {"segment", e.segment},
                    {"layout_checksum", e.layout_checksum},
                    {"world_size", e.world_size},
                    {"executor", e.executor},
                    {"pid", e.pid},
                    {"metrics_port", e.metrics_port},
                    {"kv_events_endpoint", e.kv_events_endpoint},
                    {"kv_events_replay_endpoint", e.kv_events_replay_endpoint}};
          },
          [](const ready_event& e) -> json { return {{"world_size", e.world_size}}; },
          [](const progress_event& e) -> json {
            json f = e.figures.is_object() ? e.figures : json::object();
            f["step"] = e.step;
            return f;
          },
          [](const smoke_event& e) -> json {
            return {{"steps", e.steps},
                    {"jobs_ok", e.jobs_ok},
                    {"jobs_failed", e.jobs_failed},
                    {"rounds_interrupted", e.rounds_interrupted},
                    {"slots_checked", e.slots_checked},
                    {"bytes", e.bytes}};
          },
          [](const sim_event& e) -> json {
            return e.summary.is_object() ? e.summary : json::object();
          },
          [](const finished_event& e) -> json {
            return e.line.is_object() ? e.line : json::object();
          },
          [](const rank_lost_event& e) -> json {
            return {{"rank", e.rank}, {"incarnation", e.incarnation}};
          },
          [](const fault_report_event& e) -> json {
            return json::parse(fault_report_line(e.outcome));
          },
          [](const stopped_event& e) -> json {
            json j = json::object();
            if (e.workers) j["workers"] = *e.workers;
            if (e.rank) j["rank"] = *e.rank;
            if (e.fired) j["fired"] = *e.fired;
            return j;
          },
          [](const registered_event& e) -> json {
            return {{"rank", e.rank}, {"incarnation", e.incarnation}, {"pid", e.pid}};
          },
          [](const runner_event& e) -> json {
            return {{"rank", e.rank},
                    {"steps", e.steps},
                    {"tokens_written", e.tokens_written},
                    {"loads_verified", e.loads_verified},
                    {"load_mismatches", e.load_mismatches},
                    {"blocks_load_failed", e.blocks_load_failed},
                    {"step_errors", e.step_errors},
                    {"steps_connector_only", e.steps_connector_only},
                    {"steps_skipped", e.steps_skipped},
                    {"connector_ns", e.connector_ns},
                    {"mismatches", e.mismatches}};
          },
          [](const connector_steps_event& e) -> json {
            return {{"rank", e.rank}, {"ns", e.ns}};
          },
          [](const device_lost_event& e) -> json {
            return {{"rank", e.rank},
                    {"incarnation", e.incarnation},
                    {"detail", e.detail},
                    {"fired", e.fired}};
          }},
      event);
  j["event"] = event_name(event);
  return j;
}

std::string to_line(const child_event& event) {
  if (const auto* report = std::get_if<fault_report_event>(&event)) {
    return fault_report_line(report->outcome);
  }
  return to_json(event).dump();
}

result<child_event> parse_child_line(std::string_view line) {
  const json j = json::parse(line, nullptr, false);
  if (!j.is_object()) return make_error(errc::invalid_argument, "not a JSON object");
  auto name = j.find("event");
  if (name == j.end() || !name->is_string()) {
    return make_error(errc::invalid_argument, "no \"event\" string");
  }
  const std::string event = name->get<std::string>();
  field_reader r(j, event);
  auto e = read_event(event, j, r);
  if (!e) return make_error(errc::invalid_argument, "unknown event \"" + event + "\"");
  if (!r.error()) return r.error();
  return std::move(*e);
}

}  // namespace kvc::launch
