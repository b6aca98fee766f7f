#include "actors/record/record_codec.hpp"

#include <algorithm>
#include <bit>
#include <exception>
#include <type_traits>
#include <utility>

#include "actors/record/record_pack.hpp"

namespace kvc::record {

namespace {

using msgpack::object;

/// A malformed frame: thrown inside decoding, turned into one errc::invalid_argument.
struct bad_frame : std::exception {
  explicit bad_frame(std::string w) : what_(std::move(w)) {}
  const char* what() const noexcept override { return what_.c_str(); }
  std::string what_;
};

const object* items(const object& o, uint32_t n, const char* what) {
  if (o.type != msgpack::type::ARRAY || o.via.array.size != n) {
    throw bad_frame(std::string{what} + ": expected an array of " + std::to_string(n));
  }
  return o.via.array.ptr;
}

std::span<const object> list(const object& o, const char* what) {
  if (o.type != msgpack::type::ARRAY) throw bad_frame(std::string{what} + ": expected an array");
  return {o.via.array.ptr, o.via.array.size};
}

template <class T>
T uint_as(const object& o, const char* what) {
  if (o.type != msgpack::type::POSITIVE_INTEGER) {
    throw bad_frame(std::string{what} + ": expected an unsigned integer");
  }
  if (o.via.u64 > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
    throw bad_frame(std::string{what} + ": out of range");
  }
  return static_cast<T>(o.via.u64);
}

bool bool_as(const object& o, const char* what) {
  if (o.type != msgpack::type::BOOLEAN) throw bad_frame(std::string{what} + ": expected a bool");
  return o.via.boolean;
}

std::string str_as(const object& o, const char* what) {
  if (o.type != msgpack::type::STR) throw bad_frame(std::string{what} + ": expected a string");
  return {o.via.str.ptr, o.via.str.size};
}

template <class T>
std::vector<T> uints_as(const object& o, const char* what) {
  std::vector<T> out;
  for (const object& x : list(o, what)) out.push_back(uint_as<T>(x, what));
  return out;
}

std::vector<std::string> strs_as(const object& o, const char* what) {
  std::vector<std::string> out;
  for (const object& x : list(o, what)) out.push_back(str_as(x, what));
  return out;
}

template <size_t N>
std::array<uint64_t, N> digests_as(const object& o, const char* what) {
  const object* p = items(o, N, what);
  std::array<uint64_t, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = uint_as<uint64_t>(p[i], what);
  return out;
}

recorded_request request_as(const object& o, hash_memory& mem) {
  const object* p = items(o, 5, "request");
  recorded_request r;
  r.id = str_as(p[0], "request id");
  const auto from = uint_as<uint32_t>(p[1], "hashes from");
  const auto words = list(p[2], "block hashes");
  if (words.size() % 2 != 0) throw bad_frame("block hashes: an odd number of words");
  for (size_t i = 0; i < words.size(); i += 2) {
    r.block_hashes.push_back(
        {uint_as<uint64_t>(words[i], "block hash"), uint_as<uint64_t>(words[i + 1], "block hash")});
  }
  if (!mem.extend(r.id, from, r.block_hashes)) {
    throw bad_frame("request " + r.id + ": hashes from " + std::to_string(from) +
                    " do not continue the ones recorded before");
  }
  r.num_tokens = uint_as<uint32_t>(p[3], "num_tokens");
  r.do_remote_decode = bool_as(p[4], "do_remote_decode");
  return r;
}

std::vector<recorded_scheduled> scheduled_as(const object& o, const char* what,
                                             hash_memory& mem) {
  std::vector<recorded_scheduled> out;
  for (const object& x : list(o, what)) {
    const object* p = items(x, 5, what);
    recorded_scheduled s;
    s.req = request_as(p[0], mem);
    s.block_ids = uints_as<gpu_block>(p[1], "block ids");
    s.num_computed = uint_as<uint32_t>(p[2], "num_computed");
    s.num_scheduled = uint_as<uint32_t>(p[3], "num_scheduled");
    s.resumed = bool_as(p[4], "resumed");
    out.push_back(std::move(s));
  }
  return out;
}

completion_event completion_as(const object& o) {
  const object* p = items(o, 11, "completion event");
  completion_event e;
  e.rank = uint_as<rank_id>(p[0], "event rank");
  e.incarnation = uint_as<uint32_t>(p[1], "event incarnation");
  e.seq = uint_as<uint64_t>(p[2], "event seq");
  e.step = uint_as<step_id>(p[3], "event step");
  e.job = uint_as<job_id>(p[4], "event job");
  const auto k = uint_as<uint8_t>(p[5], "event kind");
  if (k > 1) throw bad_frame("event kind: neither load nor store");
  e.kind = static_cast<transfer_kind>(k);
  e.ok = bool_as(p[6], "event ok");
  const auto err = uint_as<uint8_t>(p[7], "event error");
  if (err >= errc_count) throw bad_frame("event error: unknown errc");
  e.error = static_cast<errc>(err);
  e.bytes = uint_as<uint64_t>(p[8], "event bytes");
  e.seconds = std::bit_cast<double>(uint_as<uint64_t>(p[9], "event seconds"));
  e.detail = str_as(p[10], "event detail");
  if (e.detail.size() > max_detail_bytes) throw bad_frame("event detail: longer than allowed");
  return e;
}

record_event event_from(const object& o, hash_memory& mem) {
  const auto all = list(o, "event");
  if (all.empty()) throw bad_frame("event: empty");
  const auto k = static_cast<pack::kind>(uint_as<uint8_t>(all[0], "event kind"));
  const uint32_t n = static_cast<uint32_t>(all.size());
  auto fields = [&](uint32_t want, const char* what) {
    if (n != want + 1) {
      throw bad_frame(std::string{what} + ": expected " + std::to_string(want) + " fields");
    }
    return all.data() + 1;
  };
  switch (k) {
    case pack::kind::match: {
      const object* p = fields(3, "match");
      match_event e{request_as(p[0], mem), uint_as<uint32_t>(p[1], "num_computed"), std::nullopt};
      if (!p[2].is_nil()) e.tokens = uint_as<uint32_t>(p[2], "tokens");
      return e;
    }
    case pack::kind::alloc: {
      const object* p = fields(6, "alloc");
      return alloc_event{request_as(p[0], mem), uints_as<gpu_block>(p[1], "block ids"),
                         bool_as(p[2], "with_table"), uints_as<uint8_t>(p[3], "hashed"),
                         uint_as<uint32_t>(p[4], "num_external"), bool_as(p[5], "ok")};
    }
    case pack::kind::build: {
      const object* p = fields(6, "build");
      build_event e;
      e.step = uint_as<step_id>(p[0], "step");
      e.new_requests = scheduled_as(p[1], "new requests", mem);
      e.cached_requests = scheduled_as(p[2], "cached requests", mem);
      e.preempted = strs_as(p[3], "preempted");
      e.ok = bool_as(p[4], "ok");
      e.digest.fields = digests_as<metadata_digest::names.size()>(p[5], "metadata digest");
      return e;
    }
    case pack::kind::finished: {
      const object* p = fields(2, "finished");
      finished_event e{str_as(p[0], "request id"), bool_as(p[1], "delay_free")};
      mem.forget(e.id);
      return e;
    }
    case pack::kind::request_output: {
      const object* p = fields(4, "request output");
      return request_output_event{
          strs_as(p[0], "finished_sending"), strs_as(p[1], "finished_recving"),
          bool_as(p[2], "releases requests") ? scheduler::request_output_role::releases_requests
                                             : scheduler::request_output_role::completes_jobs,
          uints_as<gpu_block>(p[3], "invalid block ids")};
    }
    case pack::kind::take_completions:
      fields(0, "take completions");
      return take_completions_event{};
    case pack::kind::expect: {
      const object* p = fields(2, "expect");
      return expect_event{uint_as<step_id>(p[0], "step"), uint_as<uint64_t>(p[1], "now")};
    }
    case pack::kind::report: {
      const object* p = fields(4, "report");
      report_event e;
      e.report.rank = uint_as<rank_id>(p[0], "rank");
      e.report.incarnation = uint_as<uint32_t>(p[1], "incarnation");
      e.report.step = uint_as<step_id>(p[2], "step");
      for (const object& x : list(p[3], "events")) e.report.events.push_back(completion_as(x));
      return e;
    }
    case pack::kind::rank_up: {
      const object* p = fields(2, "rank up");
      return rank_up_event{uint_as<rank_id>(p[0], "rank"), uint_as<uint32_t>(p[1], "incarnation")};
    }
    case pack::kind::rank_down: {
      const object* p = fields(1, "rank down");
      return rank_down_event{uint_as<rank_id>(p[0], "rank")};
    }
    case pack::kind::tick: {
      const object* p = fields(1, "tick");
      return tick_event{uint_as<uint64_t>(p[0], "now")};
    }
    case pack::kind::reset: {
      const object* p = fields(1, "reset");
      return reset_event{bool_as(p[0], "ok")};
    }
    case pack::kind::poll: {
      const object* p = fields(2, "poll");
      poll_event e;
      e.released = bool_as(p[0], "released");
      e.digest.fields = digests_as<2>(p[1], "output digest");
      return e;
    }
  }
  throw bad_frame("event kind " + std::to_string(static_cast<int>(k)) + " is unknown");
}

/// Unpacks exactly one msgpack object filling the whole payload, bounded by its size, and
/// hands it to `f`; every failure is one errc::invalid_argument naming `what`.
template <class F>
auto unpack_whole(std::span<const char> payload, const char* what, F f)
    -> result<std::invoke_result_t<F, const object&>> {
  if (payload.size() > max_record_frame) {
    return make_error(errc::invalid_argument,
                      std::string{"record: "} + what + " frame over the limit");
  }
  const size_t n = payload.size();
  const msgpack::unpack_limit limit(n, n, n, n, n, 32);
  try {
    size_t off = 0;
    msgpack::object_handle h = msgpack::unpack(payload.data(), n, off, nullptr, nullptr, limit);
    if (off != n) throw bad_frame("trailing bytes after the frame's object");
    return f(h.get());
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument, std::string{"record: "} + what + ": " + e.what());
  }
}

}  // namespace

bool operator==(const recorded_config& a, const recorded_config& b) {
  return encode_config(a) == encode_config(b);
}

std::string encode_config(const recorded_config& c) {
  msgpack::sbuffer buf;
  pack::packer pk(buf);
  const auto& p = c.planner;
  const auto& o = c.coordinator;
  pk.pack_array(14);
  pk.pack_uint32(p.gpu_block_size);
  pk.pack_uint32(p.offloaded_block_size);
  pk.pack_uint32(p.hash_block_size);
  pk.pack(p.enable_prefix_caching);
  pk.pack_uint32(p.manager.capacity);
  pk.pack_uint8(static_cast<uint8_t>(p.manager.policy));
  pk.pack_uint32(p.manager.store_threshold);
  pk.pack_uint32(p.manager.max_tracker_size);
  pk.pack(p.manager.enable_events);
  pk.pack_uint32(o.world_size);
  pk.pack_uint64(o.finished_memory);
  pk.pack_uint64(static_cast<uint64_t>(o.job_timeout.count()));
  pk.pack_uint64(o.job_timeout_steps);
  pk.pack_uint64(static_cast<uint64_t>(o.straggler_grace.count()));
  return {buf.data(), buf.size()};
}

uint64_t config_digest(std::string_view bytes) noexcept {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string encode_header(const recorded_config& c) {
  const std::string cfg = encode_config(c);
  msgpack::sbuffer buf;
  pack::packer pk(buf);
  pk.pack_array(3);
  pk.pack_uint32(record_schema_version);
  pk.pack_uint64(config_digest(cfg));
  pk.pack_bin(static_cast<uint32_t>(cfg.size()));
  pk.pack_bin_body(cfg.data(), static_cast<uint32_t>(cfg.size()));
  return {buf.data(), buf.size()};
}

std::optional<uint32_t> header_schema(std::span<const char> payload) {
  auto schema = unpack_whole(payload, "header", [](const object& o) {
    return uint_as<uint32_t>(items(o, 3, "header")[0], "schema version");
  });
  if (!schema) return std::nullopt;
  return *schema;
}

status check_schema(uint32_t schema) {
  if (schema == record_schema_version) return status::success();
  return make_error(errc::protocol_mismatch, "record: schema version " + std::to_string(schema) +
                                                 " is not the version this kvconnect reads (" +
                                                 std::to_string(record_schema_version) + ")");
}

result<record_header> decode_header(std::span<const char> payload) {
  auto raw = unpack_whole(payload, "header", [](const object& o) {
    const object* p = items(o, 3, "header");
    const auto schema = uint_as<uint32_t>(p[0], "schema version");
    const auto digest = uint_as<uint64_t>(p[1], "config digest");
    if (p[2].type != msgpack::type::BIN) throw bad_frame("config: expected bytes");
    return std::tuple{schema, digest, std::string{p[2].via.bin.ptr, p[2].via.bin.size}};
  });
  if (!raw) return raw.error();
  auto& [schema, digest, cfg] = *raw;
  if (auto st = check_schema(schema); !st) return st;
  if (config_digest(cfg) != digest) {
    return make_error(errc::protocol_mismatch,
                      "record: the config digest in the header does not match the recorded "
                      "config (the header or the config was altered)");
  }
  auto decoded = unpack_whole(std::span<const char>{cfg}, "config", [](const object& o) {
    const object* p = items(o, 14, "config");
    recorded_config c;
    c.planner.gpu_block_size = uint_as<uint32_t>(p[0], "gpu_block_size");
    c.planner.offloaded_block_size = uint_as<uint32_t>(p[1], "offloaded_block_size");
    c.planner.hash_block_size = uint_as<uint32_t>(p[2], "hash_block_size");
    c.planner.enable_prefix_caching = bool_as(p[3], "enable_prefix_caching");
    c.planner.manager.capacity = uint_as<uint32_t>(p[4], "capacity");
    const auto policy = uint_as<uint8_t>(p[5], "eviction policy");
    if (policy > 1) throw bad_frame("eviction policy: unknown");
    c.planner.manager.policy = static_cast<scheduler::eviction_policy>(policy);
    c.planner.manager.store_threshold = uint_as<uint32_t>(p[6], "store_threshold");
    c.planner.manager.max_tracker_size = uint_as<uint32_t>(p[7], "max_tracker_size");
    c.planner.manager.enable_events = bool_as(p[8], "enable_events");
    c.coordinator.world_size = uint_as<uint32_t>(p[9], "world_size");
    c.coordinator.finished_memory = uint_as<size_t>(p[10], "finished_memory");
    c.coordinator.job_timeout =
        std::chrono::nanoseconds{uint_as<int64_t>(p[11], "job_timeout")};
    c.coordinator.job_timeout_steps = uint_as<uint64_t>(p[12], "job_timeout_steps");
    c.coordinator.straggler_grace =
        std::chrono::nanoseconds{uint_as<int64_t>(p[13], "straggler_grace")};
    return c;
  });
  if (!decoded) return decoded.error();
  return record_header{schema, digest, std::move(decoded).value()};
}

std::string event_encoder::encode(const record_event& ev) {
  msgpack::sbuffer buf;
  pack::packer pk(buf);
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, match_event>) {
          pack::match(pk, mem_, e.req.view(), e.num_computed, e.tokens);
        } else if constexpr (std::is_same_v<T, alloc_event>) {
          pack::alloc(pk, mem_, e.req.view(), e.block_ids, e.with_table, e.hashed, e.num_external,
                      e.ok);
        } else if constexpr (std::is_same_v<T, build_event>) {
          const auto fresh = views(e.new_requests);
          const auto cached = views(e.cached_requests);
          const auto preempted = views(e.preempted);
          pack::build(pk, mem_, {e.step, fresh, cached, preempted}, e.ok, e.digest);
        } else if constexpr (std::is_same_v<T, finished_event>) {
          pack::finished(pk, mem_, e.id, e.delay_free);
        } else if constexpr (std::is_same_v<T, request_output_event>) {
          const auto sending = views(e.finished_sending);
          const auto recving = views(e.finished_recving);
          pack::request_output(pk, {sending, recving, e.role, e.invalid_block_ids});
        } else if constexpr (std::is_same_v<T, take_completions_event>) {
          pack::take_completions(pk);
        } else if constexpr (std::is_same_v<T, expect_event>) {
          pack::expect(pk, e.step, e.now);
        } else if constexpr (std::is_same_v<T, report_event>) {
          pack::report(pk, e.report);
        } else if constexpr (std::is_same_v<T, rank_up_event>) {
          pack::rank_up(pk, e.rank, e.incarnation);
        } else if constexpr (std::is_same_v<T, rank_down_event>) {
          pack::rank_down(pk, e.rank);
        } else if constexpr (std::is_same_v<T, tick_event>) {
          pack::tick(pk, e.now);
        } else if constexpr (std::is_same_v<T, reset_event>) {
          pack::reset(pk, e.ok);
        } else {
          static_assert(std::is_same_v<T, poll_event>);
          pack::poll(pk, e.released, e.digest);
        }
      },
      ev);
  return {buf.data(), buf.size()};
}

result<record_event> event_decoder::decode(std::span<const char> payload) {
  return unpack_whole(payload, "event", [&](const object& o) { return event_from(o, mem_); });
}

std::array<char, 4> le32(uint32_t v) noexcept {
  return {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
          static_cast<char>(v >> 24)};
}

uint32_t seal_record_frame(char* frame, size_t payload_size) noexcept {
  const auto len = le32(static_cast<uint32_t>(payload_size));
  std::copy(len.begin(), len.end(), frame);
  return frame_checksum({frame, 4 + payload_size});
}

std::string encode_record(const run_record& rec) {
  std::string out{record_magic};
  auto frame = [&](const std::string& payload) {
    const size_t start = out.size();
    out.append(4, '\0');
    out += payload;
    const auto sum = le32(seal_record_frame(out.data() + start, payload.size()));
    out.append(sum.data(), sum.size());
  };
  frame(encode_header(rec.header.config));
  event_encoder enc;
  for (const record_event& e : rec.events) frame(enc.encode(e));
  return out;
}

std::string_view event_name(const record_event& e) noexcept {
  static constexpr std::array<std::string_view, 13> names = {
      "match",  "alloc",  "build",   "finished",  "request_output", "take_completions",
      "expect", "report", "rank_up", "rank_down", "tick",           "poll",
      "reset"};
  static_assert(names.size() == std::variant_size_v<record_event>);
  return names[e.index()];
}

}  // namespace kvc::record
