#pragma once
/// segment: the node's pinned CPU pool as one POSIX shared-memory segment (Boost.Interprocess).
///
/// One segment per node and per running topology. The launcher (or the node's first process)
/// create()s it; every worker process of the node attach()es it. Layout: a segment_header at
/// offset 0 (see shm/segment_header.hpp), the pool at `pool_offset` (2 MiB), rank-major as
/// described in shm/pool_geometry.hpp. The segment is mapped 2 MiB-aligned in every process, so
/// the pool base is 2 MiB-aligned everywhere; processes exchange slot ids, never pointers.
///
/// Ownership: a segment object owns its mapping (unmapped on destruction). The segment *name*
/// is removed only by the creating object when create_options::remove_on_close is set, and only
/// if the name still refers to the segment it created. Attachers never remove, so the segment
/// and its data survive the death of any worker. A creator that died leaves a stale segment:
/// the next create() of that name recognises it (creator pid gone, or recycled with another
/// start time) and replaces it; a segment whose creator is alive is never touched.
///
/// Errors are kvc::status values (errc::shm_error, layout_mismatch, not_found, not_ready,
/// capacity_exhausted, invalid_argument); no exception leaves this API.
///
/// Thread-safety: the object is immutable after create/attach, except the header's scheduler
/// port (an atomic) and whether this object serves it (publish / withdraw: one thread);
/// slot()/rank_region() may be called from any thread. Writing the pool is up
/// to the caller (one worker per rank region).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "proto/ids.hpp"
#include "proto/status.hpp"
#include "shm/pool_geometry.hpp"

namespace kvc::shm {

/// "/kvc-<uid>-<instance>-node<node>": unique per user and topology instance.
std::string segment_name(uint32_t uid, std::string_view instance, uint32_t node);

struct create_options {
  /// Map every page in this process at creation (MAP_POPULATE), so its first touch pays no page
  /// fault. (The pages themselves are always reserved at creation, see create.)
  bool prefault = false;
  /// Remove the name when this object is destroyed (clean shutdown of the creator).
  bool remove_on_close = true;
};

class segment {
 public:
  /// Creates the segment `name` (mode 0600) for `geometry` and reserves all its pages in
  /// /dev/shm (posix_fallocate), so that running out of shared memory is an error here and
  /// never a SIGBUS later. Fails with errc::capacity_exhausted when /dev/shm lacks the space,
  /// errc::shm_error when a segment of that name exists and is live (creator alive), being
  /// created, or not a kvconnect segment. A stale one is replaced.
  static result<segment> create(std::string_view name, const pool_geometry& geometry,
                                const create_options& opts = {});
  /// For processes of one deployment that may come in any order (vLLM builds its workers
  /// before its scheduler): create() when the name is free or stale; when a live creator holds
  /// it, attach(name, &geometry) instead (errc::layout_mismatch for another geometry).
  /// errc::not_ready while the other creator is still writing the header (call again), and
  /// errc::not_found when it gave up between the two looks (call again); create()'s other
  /// errors. is_creator() tells which happened.
  static result<segment> create_or_attach(std::string_view name, const pool_geometry& geometry,
                                          const create_options& opts = {});
  /// Attaches an existing segment after validating its header: errc::not_found when absent,
  /// errc::not_ready while its creator is still writing the header, errc::layout_mismatch on a
  /// bad magic, version, checksum, inconsistent size, or a geometry other than `*expected`.
  static result<segment> attach(std::string_view name, const pool_geometry* expected = nullptr);
  /// Removes the name unconditionally (existing mappings stay valid). errc::not_found if absent.
  static status remove(std::string_view name);
  static result<bool> exists(std::string_view name);
  /// The creator's pid when `name` is a kvconnect segment whose creator is gone (dead, or its
  /// pid recycled: process_identity); std::nullopt when its creator lives, its header is not
  /// written yet, or it is no kvconnect segment. errc::not_found when absent.
  static result<std::optional<pid_t>> stale_creator(std::string_view name);

  segment(segment&&) noexcept;
  segment& operator=(segment&&) noexcept;
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment();

  /// Start of slot `s` of rank `r`; nullptr when either is out of range.
  std::byte* slot(rank_id r, cpu_slot s) const noexcept;
  /// The contiguous region of rank `r` (num_slots * slot_stride bytes); empty when out of range.
  std::span<std::byte> rank_region(rank_id r) const noexcept;
  /// First byte of the pool (2 MiB-aligned).
  std::byte* pool_base() const noexcept;

  /// Faults in the pages of rank `r`'s region in this process without changing its bytes
  /// (MADV_POPULATE_WRITE): what an attaching worker calls before its first transfer.
  status prefault_rank(rank_id r);
  /// Asks the kernel to place rank `r`'s pages on NUMA node `node` (mbind MPOL_PREFERRED over
  /// the region's whole pages): called before prefault_rank, so that the rank's region lands
  /// next to its GPU. The policy is the segment's (shared memory keeps it per file range), so it
  /// holds for every process that faults those pages in. errc::invalid_argument for a rank out
  /// of range or a negative node; errc::shm_error naming errno when the kernel refuses.
  status prefer_numa_node(rank_id r, int node);

  const pool_geometry& geometry() const noexcept;
  uint64_t layout_checksum() const noexcept;
  const std::string& name() const noexcept;
  /// Exact size of the segment: pool_offset + world_size * num_slots * slot_stride.
  uint64_t total_bytes() const noexcept;
  pid_t creator_pid() const noexcept;
  /// True for the object that created the segment.
  bool is_creator() const noexcept;

  /// The port the node's scheduler side listens on (segment_header::scheduler_port), 0 while
  /// none does: how workers built before their scheduler find it.
  uint16_t scheduler_port() const noexcept;
  /// Sets the scheduler's port (!= 0) unless another live scheduler side serves the segment
  /// (then false, nothing written). The serving side holds an exclusive flock on the segment
  /// file while it serves; the kernel releases it when that process ends, so the port of a side
  /// that died without withdrawing is taken over (never a live side's).
  bool publish_scheduler_port(uint16_t port) const noexcept;
  /// Clears the scheduler's port if it is still `port`, and gives up the lock.
  void withdraw_scheduler_port(uint16_t port) const noexcept;

 private:
  struct impl;
  explicit segment(std::unique_ptr<impl> p) noexcept;
  static result<segment> create_impl(std::string_view name, const pool_geometry& geometry,
                                     const create_options& opts, bool attach_live);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::shm
