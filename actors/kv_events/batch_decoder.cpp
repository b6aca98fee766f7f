#include "actors/kv_events/batch_decoder.hpp"

#include <array>
#include <span>
#include <string>

#include <msgpack.hpp>

namespace kvc::kv_events {

namespace {

using json = nlohmann::json;

status bad(const std::string& what) {
  return make_error(errc::invalid_argument, "kv events: " + what);
}

json to_json(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return nullptr;
    case msgpack::type::BOOLEAN:
      return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER:
      return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER:
      return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return o.via.f64;
    case msgpack::type::STR:
      return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::BIN: {
      static constexpr char hex[] = "0123456789abcdef";
      std::string s;
      for (uint32_t i = 0; i < o.via.bin.size; ++i) {
        const auto b = static_cast<unsigned char>(o.via.bin.ptr[i]);
        s += hex[b >> 4];
        s += hex[b & 15];
      }
      return s;
    }
    case msgpack::type::ARRAY: {
      json a = json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i) a.push_back(to_json(o.via.array.ptr[i]));
      return a;
    }
    case msgpack::type::MAP: {
      json m = json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& kv = o.via.map.ptr[i];
        json k = to_json(kv.key);
        m[k.is_string() ? k.get<std::string>() : k.dump()] = to_json(kv.val);
      }
      return m;
    }
    default:
      return nullptr;  // ext: not used by vLLM's events
  }
}

struct event_layout {
  std::string_view tag;
  std::span<const std::string_view> fields;
};

constexpr std::array<std::string_view, 9> stored_fields{
    "block_hashes", "parent_block_hash", "token_ids",  "block_size", "lora_id",
    "medium",       "lora_name",         "extra_keys", "group_idx"};
constexpr std::array<std::string_view, 3> removed_fields{"block_hashes", "medium", "group_idx"};
constexpr std::array<std::string_view, 0> cleared_fields{};
constexpr std::array<event_layout, 3> layouts{{{"BlockStored", stored_fields},
                                               {"BlockRemoved", removed_fields},
                                               {"AllBlocksCleared", cleared_fields}}};

result<json> decode_event(const msgpack::object& ev, size_t index) {
  const std::string where = "event " + std::to_string(index);
  if (ev.type != msgpack::type::ARRAY || ev.via.array.size == 0 ||
      ev.via.array.ptr[0].type != msgpack::type::STR) {
    return bad(where + " is not an array starting with its tag");
  }
  const msgpack::object& t = ev.via.array.ptr[0];
  const std::string_view tag(t.via.str.ptr, t.via.str.size);
  for (const event_layout& l : layouts) {
    if (l.tag != tag) continue;
    if (ev.via.array.size - 1 > l.fields.size()) {
      return bad(where + " (" + std::string{tag} + ") has " +
                 std::to_string(ev.via.array.size - 1) + " fields, at most " +
                 std::to_string(l.fields.size()) + " expected");
    }
    json out = {{"type", std::string{tag}}};
    for (size_t i = 0; i < l.fields.size(); ++i) {
      out[std::string{l.fields[i]}] =
          i + 1 < ev.via.array.size ? to_json(ev.via.array.ptr[i + 1]) : json(nullptr);
    }
    return out;
  }
  return bad(where + " has the unknown tag \"" + std::string{tag} + "\"");
}

}  // namespace

result<nlohmann::json> decode_batch(std::string_view payload) {
  msgpack::object_handle h;
  try {
    h = msgpack::unpack(payload.data(), payload.size());
  } catch (const std::exception& e) {
    return bad(std::string{"the payload is not msgpack: "} + e.what());
  }
  const msgpack::object& b = h.get();
  if (b.type != msgpack::type::ARRAY || b.via.array.size < 2 || b.via.array.size > 3) {
    return bad("a batch is an array [ts, events(, data_parallel_rank)]");
  }
  const msgpack::object& ts = b.via.array.ptr[0];
  const msgpack::object& evs = b.via.array.ptr[1];
  const bool ts_number = ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32 ||
                         ts.type == msgpack::type::POSITIVE_INTEGER;
  if (!ts_number) return bad("the batch's ts is not a number");
  if (evs.type != msgpack::type::ARRAY) return bad("the batch's events are not an array");
  json out = {{"ts", to_json(ts)},
              {"data_parallel_rank", b.via.array.size > 2 ? to_json(b.via.array.ptr[2]) : nullptr},
              {"events", json::array()}};
  for (uint32_t i = 0; i < evs.via.array.size; ++i) {
    auto ev = decode_event(evs.via.array.ptr[i], i);
    if (!ev) return ev.error();
    out["events"].push_back(std::move(ev).value());
  }
  return out;
}

}  // namespace kvc::kv_events
