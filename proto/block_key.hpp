#pragma once
/// block_key: the opaque 128-bit identity of one offloaded KV block (vLLM uses a 32-byte hash
/// plus a 4-byte group index; 64 bits would be too collision-prone across tenants). Trivially
/// copyable, 16 bytes, usable as a hash-map key.
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace kvc {

struct block_key {
  uint64_t hi = 0;
  uint64_t lo = 0;

  friend constexpr bool operator==(const block_key&, const block_key&) = default;
  friend constexpr auto operator<=>(const block_key&, const block_key&) = default;

  /// One-to-one map from a non-negative integer (replay files, tests, benchmarks).
  /// hi carries a mix of i so keys look random to hash tables; lo keeps i itself, so the map
  /// is injective and `to_index` inverts it.
  static constexpr block_key from_index(uint64_t i) noexcept { return {mix(i), i}; }
  constexpr uint64_t to_index() const noexcept { return lo; }

  /// splitmix64 finaliser: a fast, well-distributed 64-bit mixer.
  static constexpr uint64_t mix(uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
};

/// Hash for block keys: keys are usually hashes already, but test keys are not, so mix.
struct block_key_hash {
  size_t operator()(const block_key& k) const noexcept {
    return static_cast<size_t>(block_key::mix(k.hi ^ (k.lo * 0x9e3779b97f4a7c15ULL)));
  }
};

}  // namespace kvc

template <>
struct std::hash<kvc::block_key> : kvc::block_key_hash {};
