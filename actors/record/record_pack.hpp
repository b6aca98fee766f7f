#pragma once
/// record_pack: msgpack writers of the record's events from the engine's borrowed views (so the
/// recorder copies nothing), shared by record_codec (owned events) and recorder. Internal to
/// actors/record. Pure functions.
#include <msgpack.hpp>

#include "actors/record/hash_memory.hpp"
#include "actors/record/run_record.hpp"

namespace kvc::record::pack {

using packer = msgpack::packer<msgpack::sbuffer>;

/// Event kinds on the wire (the first element of an event frame); never renumber.
enum class kind : uint8_t {
  match = 1,
  alloc = 2,
  build = 3,
  finished = 4,
  request_output = 5,
  take_completions = 6,
  expect = 7,
  report = 8,
  rank_up = 9,
  rank_down = 10,
  tick = 11,
  poll = 12,
  reset = 13,
};

void str(packer& pk, std::string_view s);
/// [id, from, hashes from `from` on (two words each), num_tokens, do_remote_decode].
void request(packer& pk, hash_memory& mem, const scheduler::request_view& r);
void match(packer& pk, hash_memory& mem, const scheduler::request_view& r, uint32_t num_computed,
           std::optional<uint32_t> tokens);
void alloc(packer& pk, hash_memory& mem, const scheduler::request_view& r,
           std::span<const gpu_block> ids,
           bool with_table, std::span<const uint8_t> hashed, uint32_t num_external, bool ok);
void build(packer& pk, hash_memory& mem, const scheduler::step_input& in, bool ok,
           const metadata_digest& d);
void finished(packer& pk, hash_memory& mem, std::string_view id, bool delay_free);
void request_output(packer& pk, const scheduler::request_output& out);
void take_completions(packer& pk);
void reset(packer& pk, bool ok);
void expect(packer& pk, step_id step, uint64_t now);
void report(packer& pk, const step_report& r);
void rank_up(packer& pk, rank_id rank, uint32_t incarnation);
void rank_down(packer& pk, rank_id rank);
void tick(packer& pk, uint64_t now);
void poll(packer& pk, bool released, const output_digest& d);

}  // namespace kvc::record::pack
