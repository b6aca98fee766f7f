#pragma once
/// address_range_set: a set of disjoint address ranges [base, base + bytes) with lookup. Copy
/// engines use it to know which memory is "device" memory (the sim and manual backends) and which
/// host ranges were registered (the cuda backend refuses ops whose CPU side lies outside them).
///
/// Invariant: ranges are non-empty, never wrap the address space and never overlap, so a lookup
/// is one ordered-map search. Every query with a range that would wrap answers "no" instead of
/// overflowing. Pure: no I/O, no threads. Not thread-safe: one owner.
#include <cstddef>
#include <cstdint>
#include <map>

#include "proto/status.hpp"

namespace kvc::cuda {

class address_range_set {
 public:
  /// Adds [base, base + bytes). errc::invalid_argument for zero bytes, a range that wraps the
  /// address space, or one that overlaps a range already held; then nothing changed.
  status insert(uintptr_t base, size_t bytes);
  /// Removes the range starting exactly at `base`; false when there is none.
  bool erase(uintptr_t base);

  /// True iff [p, p + bytes) is non-empty and lies inside one range.
  bool contains(uintptr_t p, size_t bytes) const noexcept;
  /// True iff [p, p + bytes) shares at least one byte with some range (a wrapping range counts
  /// up to the end of the address space).
  bool overlaps(uintptr_t p, size_t bytes) const noexcept;

  size_t size() const noexcept { return ranges_.size(); }
  bool empty() const noexcept { return ranges_.empty(); }

  bool contains(const void* p, size_t bytes) const noexcept {
    return contains(reinterpret_cast<uintptr_t>(p), bytes);
  }
  bool overlaps(const void* p, size_t bytes) const noexcept {
    return overlaps(reinterpret_cast<uintptr_t>(p), bytes);
  }

 private:
  std::map<uintptr_t, size_t> ranges_;  ///< base -> bytes
};

}  // namespace kvc::cuda
