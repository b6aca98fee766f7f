#pragma once
/// op_validator: the checks a copy_engine backend applies to a transfer's ops at submit, so that a
/// bad op list is refused with one clear error before anything is copied. Pure functions.
///
/// They run on every submit, so the success path is cheap: no string is built unless a check
/// fails, and ops whose destinations already arrive in ascending order (what the KV op builder
/// emits) are checked for overlap in one pass, without sorting or allocating.
#include <span>

#include "cuda/address_range_set.hpp"
#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

/// errc::invalid_argument when an op has a null pointer, zero bytes, a range that wraps the
/// address space, a source overlapping its own destination, or when two ops' destinations
/// overlap (copies inside one transfer are unordered, so overlapping destinations would race).
status validate_ops(std::span<const copy_op> ops);

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
