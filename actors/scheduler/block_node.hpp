#pragma once
/// block_node: one entry of an eviction policy's node array. For a tracked block the node's
/// index IS its CPU slot id; ARC keeps its ghost entries (keys only) in the same array above the
/// slots. 32 bytes, so two nodes share a cache line and every per-key step touches one line.
///
/// The key is stored as two raw words (no member initialisers): a fresh node array needs no
/// initialisation, so the OS commits its pages only when slots are first used.
#include <cstdint>

#include "proto/block_key.hpp"

namespace kvc::scheduler {

/// The id of no node: an absent key, the end of a list (the policies' and their index's).
inline constexpr uint32_t npos = UINT32_MAX;

struct alignas(32) block_node {
  uint64_t key_hi;
  uint64_t key_lo;
  uint32_t prev;  ///< intrusive list links (node ids; lists are circular with a sentinel)
  uint32_t next;
  int32_t ref;    ///< -1 store in flight, 0 ready and idle, n > 0 loads reading it; dead_ref
  uint32_t mark;  ///< bits 0..30: protection epoch of the last prepare_store; bit 31: policy flag

  /// ref of a node that tracks nothing: a free slot, or the slot a repeated key leaked.
  static constexpr int32_t dead_ref = INT32_MIN;
  static constexpr uint32_t epoch_mask = 0x7fffffffu;
  static constexpr uint32_t flag_bit = 0x80000000u;

  block_key key() const noexcept { return {key_hi, key_lo}; }
  void set_key(const block_key& k) noexcept {
    key_hi = k.hi;
    key_lo = k.lo;
  }
  bool has_key(const block_key& k) const noexcept { return key_hi == k.hi && key_lo == k.lo; }
  /// Ready, idle and not protected by the prepare_store running under `epoch`.
  bool evictable(uint32_t epoch) const noexcept {
    return ref == 0 && (mark & epoch_mask) != epoch;
  }
  void protect(uint32_t epoch) noexcept { mark = (mark & flag_bit) | epoch; }
  bool flag() const noexcept { return (mark & flag_bit) != 0; }
  void set_flag(bool on) noexcept { mark = on ? (mark | flag_bit) : (mark & ~flag_bit); }
  /// Tracks `k` as a store in flight (ref -1), unprotected, flag clear: where every policy's
  /// insert starts.
  void start_pending(const block_key& k) noexcept {
    set_key(k);
    ref = -1;
    mark = 0;
  }
};

static_assert(sizeof(block_node) == 32);

}  // namespace kvc::scheduler
