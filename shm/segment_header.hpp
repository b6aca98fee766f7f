#pragma once
/// segment_header: the first bytes of a kvconnect shared-memory segment, a cross-process contract.
///
/// The creator writes, in this order: identity (magic, layout_version, creator pid and start
/// time), then geometry and checksum, and last `ready = 1` with release ordering. A reader
/// that loads `ready == 1` with acquire ordering sees the whole header; before that it may only
/// rely on the identity fields (used to tell a stale segment, whose creator died, from one
/// being created right now). Every field is a lock-free std::atomic so that concurrent readers
/// and the writer never race. Offsets below are fixed: never reorder, append only, and bump
/// layout_version when the meaning of the pool changes.
///
/// The header stores sizes and offsets only, never pointers: every process maps the segment at
/// its own address.
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shm/pool_geometry.hpp"

namespace kvc::shm {

/// "KVCSHM01" read as a little-endian u64.
inline constexpr uint64_t segment_magic = 0x31304d485343564bull;
inline constexpr uint32_t segment_layout_version = 1;

struct segment_header {
  std::atomic<uint64_t> magic;               // offset 0
  std::atomic<uint32_t> layout_version;      // 8
  std::atomic<uint32_t> ready;               // 12: 0 while being written, 1 when complete
  std::atomic<int64_t> creator_pid;          // 16
  std::atomic<uint64_t> creator_start_time;  // 24: /proc/<pid>/stat field 22 (clock ticks)
  std::atomic<uint32_t> world_size;          // 32
  std::atomic<uint32_t> num_slots;           // 36
  std::atomic<uint64_t> slot_bytes;          // 40
  std::atomic<uint64_t> slot_stride;         // 48
  std::atomic<uint64_t> pool_offset;         // 56
  std::atomic<uint64_t> total_bytes;         // 64: exact size of the segment
  std::atomic<uint64_t> layout_checksum;     // 72: over version and the geometry fields
  /// 80: the port the node's scheduler side listens on, 0 while none does: the rendezvous of
  /// workers built before their scheduler (vLLM's order). Written after `ready`, by the
  /// scheduler side only; readable at any time.
  std::atomic<uint32_t> scheduler_port;
  std::atomic<uint32_t> reserved;  // 84: zero
};

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(offsetof(segment_header, creator_start_time) == 24);
static_assert(offsetof(segment_header, layout_checksum) == 72);
static_assert(offsetof(segment_header, scheduler_port) == 80);
static_assert(sizeof(segment_header) == 88);
static_assert(sizeof(segment_header) <= pool_offset);

/// FNV-1a 64 over layout_version and the geometry fields as stored in the header
/// (world_size, num_slots, slot_bytes, slot_stride, pool_offset, total_bytes), little-endian.
uint64_t layout_checksum(uint32_t version, uint32_t world_size, uint32_t num_slots,
                         uint64_t slot_bytes, uint64_t slot_stride, uint64_t pool_off,
                         uint64_t total_bytes) noexcept;
/// The checksum a header for `g` carries at the current layout version.
uint64_t layout_checksum(const pool_geometry& g) noexcept;

}  // namespace kvc::shm
