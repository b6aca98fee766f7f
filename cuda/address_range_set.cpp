#include "cuda/address_range_set.hpp"

#include <iterator>

namespace kvc::cuda {

status address_range_set::insert(uintptr_t base, size_t bytes) {
  if (bytes == 0) return make_error(errc::invalid_argument, "address range: zero bytes");
  if (base > UINTPTR_MAX - bytes) {
    return make_error(errc::invalid_argument, "address range: wraps the address space");
  }
  if (overlaps(base, bytes)) {
    return make_error(errc::invalid_argument, "address range: overlaps a range already held");
  }
  ranges_.emplace(base, bytes);
  return {};
}

bool address_range_set::erase(uintptr_t base) {
  return ranges_.erase(base) == 1;
}

bool address_range_set::contains(uintptr_t p, size_t bytes) const noexcept {
  if (bytes == 0 || p > UINTPTR_MAX - bytes) return false;
  auto it = ranges_.upper_bound(p);
  if (it == ranges_.begin()) return false;
  --it;
  const uintptr_t off = p - it->first;
  return off < it->second && bytes <= it->second - off;
}

bool address_range_set::overlaps(uintptr_t p, size_t bytes) const noexcept {
  if (bytes == 0) return false;
  const uintptr_t end = p > UINTPTR_MAX - bytes ? UINTPTR_MAX : p + bytes;
  auto it = ranges_.upper_bound(p);
  if (it != ranges_.end() && it->first < end) return true;
  if (it == ranges_.begin()) return false;
  --it;
  return p - it->first < it->second;
}

}  // namespace kvc::cuda
