#pragma once
/// op_validator: the checks a copy_engine backend applies to a transfer's ops at submit, so that a
/// bad op list is refused with one clear error before anything is copied. Pure functions.
///
/// They run on every submit, so the success path is cheap: no string is built unless a check
/// fails; ops whose destinations already arrive in ascending order (what the KV op builder emits
/// for a store into consecutive slots) are checked for overlap in one pass; a thousand or more
/// ops of one size in any order (pages of one layout: loads into the GPU blocks vLLM allocated,
/// stores into whatever slots the pool handed out) go through a hash of destination buckets of
/// that size, in linear time; other unordered lists are sorted. An op_checker keeps its scratch
/// between calls, so after its first calls none of this allocates.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/address_range_set.hpp"
#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

/// errc::invalid_argument when an op has a null pointer, zero bytes, a range that wraps the
/// address space, a source overlapping its own destination, or when two ops' destinations
/// overlap (copies inside one transfer are unordered, so overlapping destinations would race).
/// Stateless form of op_checker::validate (allocates its scratch for unordered ops).
status validate_ops(std::span<const copy_op> ops);

/// validate_ops with scratch kept between calls: a backend holds one. Not thread-safe.
class op_checker {
 public:
  status validate(std::span<const copy_op> ops);
  /// Unordered equal-sized lists at least this long take the hash; shorter ones sort.
  static constexpr size_t hash_from_ops = 1024;

 private:
  /// Equal-sized ops in any order: two ops of B bytes overlap only if their destinations lie in
  /// the same or neighbouring B-byte buckets, and no two valid ones share a bucket.
  status check_equal_sized(std::span<const copy_op> ops);
  status check_sorted(std::span<const copy_op> ops);

  struct slot {
    uintptr_t bucket = 0;
    uint32_t op = UINT32_MAX;  ///< UINT32_MAX: empty
  };
  std::vector<slot> table_;
  std::vector<size_t> order_;
};

/// Strict placement (the cuda backend): each op's GPU side must lie inside one range of
/// `device` and its CPU side inside one range of `host` (one pinned chunk). An op whose sides
/// are swapped (a load submitted as a store) is named as such. errc::invalid_argument.
status check_placement(direction dir, std::span<const copy_op> ops, const address_range_set& host,
                       const address_range_set& device);

/// The cuda backend's ordering rule: errc::invalid_argument unless the submit carries a
/// wait_event or states no_dependency (see submit_options).
status check_ordering(const submit_options& opts);

/// Sum of the ops' bytes.
uint64_t total_bytes(std::span<const copy_op> ops) noexcept;

}  // namespace kvc::cuda
