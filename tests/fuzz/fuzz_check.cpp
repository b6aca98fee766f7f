#include <cstdio>
#include <cstdlib>

#include "tests/fuzz/fuzz_targets.hpp"

namespace kvc::fuzz {

void violated(const char* what) {
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

}  // namespace kvc::fuzz
