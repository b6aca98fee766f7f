#include "cuda/device_health.hpp"

#include <string>

namespace kvc::cuda {

namespace {
constexpr int k_not_ready = 600;  // cudaErrorNotReady: a state, not a failure
}  // namespace

int device_health::observe(std::string_view name, int code) {
  if (code != 0 && code != k_not_ready) last_failure_ = failure_text(name, code);
  if (!latched() && is_sticky(code)) {
    latched_code_ = code;
    latched_by_ = std::string(name);
  }
  return code;
}

std::string device_health::failure_text(std::string_view call, int code) const {
  std::string name = namer_ ? namer_(code) : std::string(sticky_name(code));
  if (name.empty()) name = "CUDA error " + std::to_string(code);
  return std::string(call) + " returned " + name + " (" + std::to_string(code) + ")";
}

status device_health::admit() const {
  if (!latched()) return {};
  return make_error(errc::device_unavailable,
                    "cuda copy engine: device unusable since " + latched_by_ + " returned " +
                        std::string(sticky_name(latched_code_)) + " (" +
                        std::to_string(latched_code_) +
                        "); the process must restart to use the GPU again");
}

}  // namespace kvc::cuda
