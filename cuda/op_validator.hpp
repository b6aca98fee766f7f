#pragma once
/// op_validator: the checks every copy_engine backend applies to a transfer's ops at submit, so
/// that a bad op list is refused with one clear error before anything is copied. Pure functions.
#include <span>

#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

/// errc::invalid_argument when an op has a null pointer, zero bytes, a range that wraps the
/// address space, a source overlapping its own destination, or when two ops' destinations
/// overlap (copies inside one transfer are unordered, so overlapping destinations would race).
status validate_ops(std::span<const copy_op> ops);

/// Sum of the ops' bytes.
uint64_t total_bytes(std::span<const copy_op> ops) noexcept;

}  // namespace kvc::cuda
