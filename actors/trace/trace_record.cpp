#include "actors/trace/trace_record.hpp"

#include <spdlog/fmt/fmt.h>

namespace kvc::trace {

namespace {

/// Appends `s` as a JSON string (quotes, backslashes and control characters escaped).
void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

}  // namespace

std::string_view to_string(trace_level l) noexcept {
  switch (l) {
    case trace_level::off:
      return "off";
    case trace_level::messages:
      return "messages";
    case trace_level::jobs:
      return "jobs";
  }
  return "?";
}

result<trace_level> parse_trace_level(std::string_view s) {
  if (s == "off") return trace_level::off;
  if (s == "messages") return trace_level::messages;
  if (s == "jobs") return trace_level::jobs;
  return make_error(errc::invalid_argument,
                    "trace level '" + std::string{s} + "' is not one of off, messages, jobs");
}

std::string_view to_string(direction d) noexcept {
  switch (d) {
    case direction::send:
      return "send";
    case direction::receive:
      return "receive";
    case direction::local:
      return "local";
  }
  return "?";
}

std::string to_json_line(const trace_record& r) {
  std::string out;
  out.reserve(256);
  append_json_line(out, r);
  return out;
}

void append_json_line(std::string& out, const trace_record& r) {
  fmt::format_to(std::back_inserter(out), "{{\"wall_ns\":{},\"mono_ns\":{}", r.wall_ns, r.mono_ns);
  if (r.dur_ns > 0) fmt::format_to(std::back_inserter(out), ",\"dur_ns\":{}", r.dur_ns);
  fmt::format_to(std::back_inserter(out), ",\"node\":{},\"pid\":{},\"role\":", r.node, r.pid);
  append_json_string(out, r.role);
  out += ",\"track\":";
  append_json_string(out, r.track);
  out += ",\"dir\":";
  append_json_string(out, to_string(r.dir));
  out += ",\"type\":";
  append_json_string(out, r.type);
  if (r.step >= 0) fmt::format_to(std::back_inserter(out), ",\"step\":{}", r.step);
  if (r.rank >= 0) fmt::format_to(std::back_inserter(out), ",\"rank\":{}", r.rank);
  if (r.job >= 0) fmt::format_to(std::back_inserter(out), ",\"job\":{}", r.job);
  if (!r.request.empty()) {
    out += ",\"request\":";
    append_json_string(out, r.request);
  }
  fmt::format_to(std::back_inserter(out), ",\"bytes\":{}", r.bytes);
  if (!r.msg.empty()) {
    out += ",\"msg\":";
    append_json_string(out, r.msg);
  } else if (std::string id = message_id_of(r); !id.empty()) {
    out += ",\"msg\":";
    append_json_string(out, id);
  }
  if (r.value >= 0) fmt::format_to(std::back_inserter(out), ",\"value\":{}", r.value);
  if (!r.note.empty()) {
    out += ",\"note\":";
    append_json_string(out, r.note);
  }
  out.push_back('}');
}

std::string message_id_of(const trace_record& r) {
  if (!r.msg.empty()) return r.msg;
  if (r.dir == direction::local || r.rank < 0 || r.incarnation < 0) return {};
  return message_id(r.type, r.step, fmt::format("r{}.{}", r.rank, r.incarnation));
}

std::string message_id(std::string_view type, int64_t step, std::string_view peer) {
  if (step < 0) return fmt::format("{}/{}", type, peer);
  return fmt::format("{}/{}/{}", type, step, peer);
}

}  // namespace kvc::trace
