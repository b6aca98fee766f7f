#include "launch/config/synthetic_kv_spec.hpp"

#include <limits>

namespace kvc::launch {

status validate(const synthetic_kv_spec& kv) {
  if (kv.layers == 0 || kv.page_bytes == 0 || kv.block_factor == 0) {
    return make_error(errc::invalid_argument,
                      "kv cache: layers, page bytes and block factor must be >= 1");
  }
  if (kv.gpu_blocks < 2) {
    return make_error(errc::invalid_argument,
                      "kv cache: gpu blocks must be >= 2 (block 0 is the null block)");
  }
  constexpr uint64_t max = std::numeric_limits<uint64_t>::max();
  if (kv.page_bytes > max / kv.gpu_blocks ||
      kv.page_bytes > max / (uint64_t{kv.layers} * kv.block_factor)) {
    return make_error(errc::invalid_argument, "kv cache: sizes overflow");
  }
  return status::success();
}

}  // namespace kvc::launch
