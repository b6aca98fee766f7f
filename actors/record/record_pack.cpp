#include "actors/record/record_pack.hpp"

#include <bit>

namespace kvc::record::pack {

namespace {

void head(packer& pk, kind k, uint32_t fields) {
  pk.pack_array(fields + 1);
  pk.pack_uint8(static_cast<uint8_t>(k));
}

template <class T>
void uints(packer& pk, std::span<const T> v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const T& x : v) pk.pack_uint64(x);
}

void strs(packer& pk, std::span<const std::string_view> v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (std::string_view s : v) str(pk, s);
}

void scheduled(packer& pk, hash_memory& mem, std::span<const scheduler::scheduled_request> v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) {
    pk.pack_array(5);
    request(pk, mem, s.req);
    uints(pk, s.block_ids);
    pk.pack_uint32(s.num_computed);
    pk.pack_uint32(s.num_scheduled);
    pk.pack(s.resumed);
  }
}

template <size_t N>
void digests(packer& pk, const std::array<uint64_t, N>& d) {
  pk.pack_array(N);
  for (uint64_t x : d) pk.pack_uint64(x);
}

}  // namespace

void str(packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void request(packer& pk, hash_memory& mem, const scheduler::request_view& r) {
  const uint32_t from = mem.written(r.id, r.block_hashes);
  const auto tail = r.block_hashes.subspan(from);
  pk.pack_array(5);
  str(pk, r.id);
  pk.pack_uint32(from);
  pk.pack_array(static_cast<uint32_t>(tail.size() * 2));
  for (const block_key& k : tail) {
    pk.pack_uint64(k.hi);
    pk.pack_uint64(k.lo);
  }
  pk.pack_uint32(r.num_tokens);
  pk.pack(r.do_remote_decode);
}

void match(packer& pk, hash_memory& mem, const scheduler::request_view& r, uint32_t num_computed,
           std::optional<uint32_t> tokens) {
  head(pk, kind::match, 3);
  request(pk, mem, r);
  pk.pack_uint32(num_computed);
  if (tokens) {
    pk.pack_uint32(*tokens);
  } else {
    pk.pack_nil();
  }
}

void alloc(packer& pk, hash_memory& mem, const scheduler::request_view& r,
           std::span<const gpu_block> ids,
           bool with_table, std::span<const uint8_t> hashed, uint32_t num_external, bool ok) {
  head(pk, kind::alloc, 6);
  request(pk, mem, r);
  uints(pk, ids);
  pk.pack(with_table);
  uints(pk, hashed);
  pk.pack_uint32(num_external);
  pk.pack(ok);
}

void build(packer& pk, hash_memory& mem, const scheduler::step_input& in, bool ok,
           const metadata_digest& d) {
  head(pk, kind::build, 6);
  pk.pack_uint64(in.step);
  scheduled(pk, mem, in.new_requests);
  scheduled(pk, mem, in.cached_requests);
  strs(pk, in.preempted);
  pk.pack(ok);
  digests(pk, d.fields);
}

void finished(packer& pk, hash_memory& mem, std::string_view id, bool delay_free) {
  mem.forget(id);
  head(pk, kind::finished, 2);
  str(pk, id);
  pk.pack(delay_free);
}

void request_output(packer& pk, const scheduler::request_output& out) {
  head(pk, kind::request_output, 4);
  strs(pk, out.finished_sending);
  strs(pk, out.finished_recving);
  pk.pack(out.role == scheduler::request_output_role::releases_requests);
  uints(pk, out.invalid_block_ids);
}

void take_completions(packer& pk) { head(pk, kind::take_completions, 0); }

void reset(packer& pk, bool ok) {
  head(pk, kind::reset, 1);
  pk.pack(ok);
}

void expect(packer& pk, step_id step, uint64_t now) {
  head(pk, kind::expect, 2);
  pk.pack_uint64(step);
  pk.pack_uint64(now);
}

void report(packer& pk, const step_report& r) {
  head(pk, kind::report, 4);
  pk.pack_uint32(r.rank);
  pk.pack_uint32(r.incarnation);
  pk.pack_uint64(r.step);
  pk.pack_array(static_cast<uint32_t>(r.events.size()));
  for (const completion_event& e : r.events) {
    pk.pack_array(11);
    pk.pack_uint32(e.rank);
    pk.pack_uint32(e.incarnation);
    pk.pack_uint64(e.seq);
    pk.pack_uint64(e.step);
    pk.pack_uint64(e.job);
    pk.pack_uint8(static_cast<uint8_t>(e.kind));
    pk.pack(e.ok);
    pk.pack_uint8(static_cast<uint8_t>(e.error));
    pk.pack_uint64(e.bytes);
    pk.pack_uint64(std::bit_cast<uint64_t>(e.seconds));  // exact, NaN included
    str(pk, e.detail);
  }
}

void rank_up(packer& pk, rank_id rank, uint32_t incarnation) {
  head(pk, kind::rank_up, 2);
  pk.pack_uint32(rank);
  pk.pack_uint32(incarnation);
}

void rank_down(packer& pk, rank_id rank) {
  head(pk, kind::rank_down, 1);
  pk.pack_uint32(rank);
}

void tick(packer& pk, uint64_t now) {
  head(pk, kind::tick, 1);
  pk.pack_uint64(now);
}

void poll(packer& pk, bool released, const output_digest& d) {
  head(pk, kind::poll, 2);
  pk.pack(released);
  digests(pk, d.fields);
}

}  // namespace kvc::record::pack
