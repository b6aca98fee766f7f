// libFuzzer's entry for one target (KVC_FUZZ_ENTRY names its input function, fuzz_targets.hpp).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return KVC_FUZZ_ENTRY(data, size);
}
