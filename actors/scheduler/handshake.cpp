#include "actors/scheduler/handshake.hpp"

#include <cinttypes>
#include <cstdio>

namespace kvc::scheduler {

namespace {

/// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::string who(const worker_registration& r) {
  return "rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ", incarnation " +
         std::to_string(r.incarnation) + ")";
}

}  // namespace

status validate_expectation(const handshake_expectation& want) {
  if (auto st = validate(want.topology); !st) return st;
  if (want.segment.empty()) return make_error(errc::invalid_argument, "no shm segment name");
  if (want.token.empty()) return make_error(errc::invalid_argument, "no shared token");
  if (want.nodes == 0 || (want.nodes > 1 && want.topology.node != 0)) {
    return make_error(errc::invalid_argument,
                      "nodes " + std::to_string(want.nodes) + " with the scheduler on node " +
                          std::to_string(want.topology.node) +
                          ": one node, or several with the scheduler on node 0");
  }
  return status::success();
}

status validate_registration(const handshake_expectation& want, const worker_registration& got) {
  auto refuse = [&](errc code, const std::string& why) {
    return make_error(code, "registration of " + who(got) + " refused: " + why);
  };
  if (got.protocol_version != protocol_version) {
    return refuse(errc::protocol_mismatch,
                  "protocol version " + std::to_string(got.protocol_version) +
                      ", the scheduler speaks " + std::to_string(protocol_version));
  }
  if (!same_secret(got.token, want.token)) return refuse(errc::protocol_mismatch, "wrong token");
  const kvc::topology& t = want.topology;
  if (want.nodes <= 1 && got.node != t.node) {
    return refuse(errc::protocol_mismatch, "node " + std::to_string(got.node) +
                                               ", the scheduler serves node " +
                                               std::to_string(t.node));
  }
  if (want.nodes > 1 && got.node >= want.nodes) {
    return refuse(errc::protocol_mismatch, "node " + std::to_string(got.node) +
                                               ", the scheduler serves nodes 0.." +
                                               std::to_string(want.nodes - 1));
  }
  if (got.tp_size != t.tp_size || got.pp_size != t.pp_size) {
    return refuse(errc::protocol_mismatch,
                  "topology tp=" + std::to_string(got.tp_size) +
                      " pp=" + std::to_string(got.pp_size) + ", the scheduler runs tp=" +
                      std::to_string(t.tp_size) + " pp=" + std::to_string(t.pp_size));
  }
  if (got.tp_rank >= got.tp_size || got.pp_rank >= got.pp_size || got.rank >= want.world_size() ||
      got.rank != got.pp_rank * got.tp_size + got.tp_rank) {
    return refuse(errc::invalid_argument,
                  "rank out of range or inconsistent: tp_rank=" + std::to_string(got.tp_rank) +
                      " pp_rank=" + std::to_string(got.pp_rank) + " in a world of " +
                      std::to_string(want.world_size()));
  }
  if (got.node == t.node && got.segment != want.segment) {
    return refuse(errc::layout_mismatch,
                  "shm segment " + got.segment + ", the scheduler's is " + want.segment);
  }
  if (got.layout_checksum != want.layout_checksum) {
    return refuse(errc::layout_mismatch, "layout checksum " + hex(got.layout_checksum) +
                                             " differs from segment " + want.segment + "'s " +
                                             hex(want.layout_checksum));
  }
  return status::success();
}

worker_registration make_registration(const handshake_expectation& want, rank_id rank,
                                      uint32_t incarnation, int64_t pid) {
  const kvc::topology& t = want.topology;
  return {.protocol_version = protocol_version,
          .rank = rank,
          .tp_size = t.tp_size,
          .pp_size = t.pp_size,
          .tp_rank = t.tp_rank(rank),
          .pp_rank = t.pp_rank(rank),
          .node = t.node,
          .incarnation = incarnation,
          .segment = want.segment,
          .layout_checksum = want.layout_checksum,
          .token = want.token,
          .pid = pid};
}

}  // namespace kvc::scheduler
