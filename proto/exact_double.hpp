#pragma once
/// exact_double: how a double field of a message struct is inspected. CAF 0.17 serialises a
/// plain double through its own IEEE-754 packing (caf/detail/ieee_754.hpp), which never
/// terminates on ±infinity and garbles NaN, -0.0 and subnormals. Wrapping the field —
/// `f(x.a, kvc::exact_double{x.seconds})` — sends its bit pattern as a uint64_t instead: exact
/// for every value. Inspectors that only print (result_type void, e.g. CAF's to_string) see the
/// double itself. CAF-free, like the rest of proto/.
#include <bit>
#include <cstdint>
#include <type_traits>

namespace kvc {

struct exact_double {
  double& value;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, exact_double& x) {
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.value);
  } else {
    auto bits = std::bit_cast<uint64_t>(x.value);
    auto result = f(bits);
    if constexpr (Inspector::writes_state) x.value = std::bit_cast<double>(bits);
    return result;
  }
}

}  // namespace kvc
