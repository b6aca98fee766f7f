#pragma once
/// The deployment's shape, shared by every process: tensor- and pipeline-parallel sizes, the
/// node, and the largest world kvconnect serves. Plain values; thread-safe to copy and read.
#include <cstdint>

#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc {

/// Largest TP x PP world (the coordinator's bitsets hold 256 ranks).
inline constexpr uint32_t max_world_size = 256;

struct topology {
  uint32_t tp_size = 1;
  uint32_t pp_size = 1;
  uint32_t node = 0;

  uint32_t world_size() const noexcept { return tp_size * pp_size; }
  /// A global rank's coordinates: rank = pp_rank * tp_size + tp_rank.
  uint32_t tp_rank(rank_id rank) const noexcept { return rank % tp_size; }
  uint32_t pp_rank(rank_id rank) const noexcept { return rank / tp_size; }

  friend bool operator==(const topology&, const topology&) = default;
};

/// tp_size, pp_size >= 1 and tp_size * pp_size <= max_world_size; errc::invalid_argument
/// naming the sizes otherwise.
status validate(const topology& t);

}  // namespace kvc
