#pragma once
/// What the multi-process engine test's two sides share: the model's geometry, the KV a token
/// holds (the simulated model's: a function of its prefix hash, layer and rank, so both sides
/// know every byte), and the line protocol between the engine's scheduler process (the test)
/// and its worker processes (kvc_mp_worker), which stands in for the engine's own channel
/// (vLLM sends SchedulerOutput to its workers through a shm queue; the connector metadata
/// travels through kvconnect's actors).
///
/// Engine -> worker, one line per step:
///   S <step> F <n> <req>... W <n> (<block> <pos> <hash>)... V <n> (<block> <pos> <hash>)...
///     F: requests finished in the previous step (get_finished), W: tokens the forward writes,
///     V: tokens just loaded from the CPU pool, to check byte for byte before they are used.
///   Q: quit (after the scheduler stopped the workers).
/// Worker -> engine:
///   R <rank>                 registered, KV cache registered (once, at start)
///   A <step>                 the step ran cleanly
///   E <step> <message>       it did not (the test fails with the message)
///   D <verified_tokens> <stores_checked> <loads_seen> <stores_seen>   totals, at Q
///
/// Test support, header-only; pure functions.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "launch/engines/sim/kv_content.hpp"
#include "proto/block_key.hpp"
#include "proto/ids.hpp"

namespace kvc::mp {

inline constexpr uint32_t tp_size = 2;
inline constexpr uint32_t pp_size = 2;
inline constexpr uint32_t world_size = tp_size * pp_size;
inline constexpr uint32_t gpu_block_size = 4;   ///< tokens per GPU block (= per block hash)
inline constexpr uint32_t block_factor = 2;     ///< GPU blocks per offloaded block
inline constexpr uint32_t num_gpu_blocks = 40;  ///< per rank, block 0 is null
inline constexpr uint32_t num_layers = 2;
inline constexpr uint32_t head_dim = 8;                ///< 2-byte elements
inline constexpr uint32_t token_bytes = 2 * head_dim;  ///< one token, one layer, one rank
inline constexpr uint64_t page_bytes = uint64_t{gpu_block_size} * token_bytes;
inline constexpr uint32_t cpu_slots = 40;  ///< per rank
inline constexpr uint64_t slot_bytes = uint64_t{block_factor} * num_layers * page_bytes;
inline constexpr const char* token = "mp-test-token";

/// The model's hashes and KV bytes are the simulated engine's (launch/engines/sim/kv_content.hpp):
/// sim::chain, sim::block_hash_of, sim::token_kv.
using sim::block_hash_of;
using sim::chain;

/// The KV bytes of a token with prefix hash h, in `layer`, on `rank`.
inline void token_kv(uint64_t h, uint32_t layer, rank_id rank, std::byte* out) noexcept {
  sim::token_kv(h, layer, rank, {out, token_bytes});
}

/// One token position: GPU block, slot in the block, prefix hash.
struct token_ref {
  gpu_block block = 0;
  uint32_t pos = 0;
  uint64_t hash = 0;
};

struct step_command {
  step_id step = 0;
  /// The step computes nothing: the worker finishes its transfers before it reports (no forward
  /// to overlap them with), so an idle engine drains in a known number of steps.
  bool drain = false;
  std::vector<std::string> finished;
  std::vector<token_ref> writes;
  std::vector<token_ref> verifies;
};

inline std::string encode(const step_command& c) {
  std::ostringstream os;
  os << "S " << c.step << " D " << (c.drain ? 1 : 0) << " F " << c.finished.size();
  for (const auto& f : c.finished) os << ' ' << f;
  os << " W " << c.writes.size();
  for (const auto& t : c.writes) os << ' ' << t.block << ' ' << t.pos << ' ' << t.hash;
  os << " V " << c.verifies.size();
  for (const auto& t : c.verifies) os << ' ' << t.block << ' ' << t.pos << ' ' << t.hash;
  return os.str();
}

/// Parses a step line; false when it is malformed.
inline bool decode(const std::string& line, step_command& c) {
  std::istringstream is(line);
  std::string tag;
  size_t n = 0;
  if (!(is >> tag) || tag != "S" || !(is >> c.step)) return false;
  int drain = 0;
  if (!(is >> tag) || tag != "D" || !(is >> drain) || (drain != 0 && drain != 1)) return false;
  c.drain = drain == 1;
  if (!(is >> tag) || tag != "F" || !(is >> n)) return false;
  c.finished.resize(n);
  for (auto& f : c.finished) {
    if (!(is >> f)) return false;
  }
  auto refs = [&is, &tag, &n](const char* want, std::vector<token_ref>& out) {
    if (!(is >> tag) || tag != want || !(is >> n)) return false;
    out.resize(n);
    for (auto& t : out) {
      if (!(is >> t.block >> t.pos >> t.hash)) return false;
    }
    return true;
  };
  return refs("W", c.writes) && refs("V", c.verifies);
}

}  // namespace kvc::mp
