#include "cuda/device_health.hpp"

#include <string>

namespace kvc::cuda {

int device_health::observe(std::string_view name, int code) {
  if (!latched() && is_sticky(code)) {
    latched_code_ = code;
    latched_by_ = std::string(name);
  }
  return code;
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
