#include "actors/kv_events/batch_encoder.hpp"

#include <msgpack.hpp>

namespace kvc::kv_events {

namespace {

using packer = msgpack::packer<msgpack::sbuffer>;

void put_be64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(v >> shift));
}

void pack_str(packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(packer& pk, std::span<const block_key> keys) {
  pk.pack_array(static_cast<uint32_t>(keys.size()));
  for (const block_key& k : keys) {
    const std::string b = hash_bytes(k);
    pk.pack_bin(static_cast<uint32_t>(b.size()));
    pk.pack_bin_body(b.data(), static_cast<uint32_t>(b.size()));
  }
}

void pack_event(packer& pk, const kv_event& ev, const batch_options& o) {
  if (ev.kind == kv_event_kind::stored) {
    pk.pack_array(8);
    pack_str(pk, "BlockStored");
    pack_hashes(pk, ev.keys);
    pk.pack_nil();     // parent_block_hash
    pk.pack_array(0);  // token_ids
    pk.pack_uint32(o.block_size);
    pk.pack_nil();  // lora_id
    pack_str(pk, to_string(ev.where));
    pk.pack_nil();  // lora_name
  } else {
    pk.pack_array(3);
    pack_str(pk, "BlockRemoved");
    pack_hashes(pk, ev.keys);
    pack_str(pk, to_string(ev.where));
  }
}

void pack_header(packer& pk, double ts, const batch_options& o) {
  pk.pack_array(o.data_parallel_rank ? 3 : 2);
  pk.pack_double(ts);
}

std::string finish(msgpack::sbuffer& buf, packer& pk, const batch_options& o) {
  if (o.data_parallel_rank) pk.pack_int64(*o.data_parallel_rank);
  return std::string(buf.data(), buf.size());
}

}  // namespace

std::string hash_bytes(const block_key& k) {
  std::string out;
  out.reserve(16);
  put_be64(out, k.hi);
  put_be64(out, k.lo);
  return out;
}

std::string encode_batch(double ts, std::span<const kv_event> events, const batch_options& o) {
  msgpack::sbuffer buf;
  packer pk(buf);
  pack_header(pk, ts, o);
  pk.pack_array(static_cast<uint32_t>(events.size()));
  for (const kv_event& ev : events) pack_event(pk, ev, o);
  return finish(buf, pk, o);
}

std::string encode_cleared(double ts, const batch_options& o) {
  msgpack::sbuffer buf;
  packer pk(buf);
  pack_header(pk, ts, o);
  pk.pack_array(1);
  pk.pack_array(1);
  pack_str(pk, "AllBlocksCleared");
  return finish(buf, pk, o);
}

std::string sequence_bytes(uint64_t seq) {
  std::string out;
  put_be64(out, seq);
  return out;
}

std::string end_of_replay() {
  return std::string(8, '\xff');
}

}  // namespace kvc::kv_events
