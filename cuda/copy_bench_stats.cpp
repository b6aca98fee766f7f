#include "cuda/copy_bench_stats.hpp"

#include <algorithm>
#include <cmath>

namespace kvc::cuda {

result<std::vector<copy_shape>> vllm_like_shapes(uint64_t working_set, uint32_t regions) {
  if (regions == 0) return make_error(errc::invalid_argument, "shapes: zero regions");
  constexpr uint64_t k_kib = 1024;
  constexpr uint64_t k_block = 2 * k_kib * k_kib;
  if (working_set < k_block || working_set / regions < 64 * k_kib) {
    return make_error(errc::invalid_argument,
                      "shapes: working set of " + std::to_string(working_set) +
                          " B holds no 2 MiB block or no 64 KiB page per region");
  }
  std::vector<copy_shape> out;
  for (uint64_t page : {16 * k_kib, 32 * k_kib, 64 * k_kib}) {
    const auto blocks = static_cast<uint32_t>(working_set / regions / page);
    out.push_back({std::to_string(regions) + "x" + std::to_string(blocks) + "x" +
                       std::to_string(page / k_kib) + "KiB",
                   regions, blocks, page});
  }
  const auto blocks = static_cast<uint32_t>(working_set / k_block);
  out.push_back({"1x" + std::to_string(blocks) + "x2MiB", 1, blocks, k_block});
  return out;
}

result<double> percentile(std::span<const double> values, double p) {
  if (values.empty()) return make_error(errc::invalid_argument, "percentile of no values");
  if (!(p >= 0 && p <= 100)) {
    return make_error(errc::invalid_argument, "percentile out of [0, 100]: " + std::to_string(p));
  }
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[rank == 0 ? 0 : rank - 1];
}

double gbps(uint64_t bytes, double seconds) noexcept {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

double ratio_to_ceiling(double measured_gbps, double ceiling_gbps) noexcept {
  return ceiling_gbps > 0 ? measured_gbps / ceiling_gbps : 0.0;
}

}  // namespace kvc::cuda
