#pragma once
// KVC_REQUIRE_GPU=1 marks a machine that must have a usable GPU: there the gpu-labelled tests
// fail instead of skipping when the cuda backend cannot run.
#include <cstdlib>
#include <string_view>

namespace kvc::cuda {

inline bool gpu_required() {
  const char* v = std::getenv("KVC_REQUIRE_GPU");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace kvc::cuda
