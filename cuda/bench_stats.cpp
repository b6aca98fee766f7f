#include "cuda/bench_stats.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kvc::cuda {

result<double> percentile(std::span<const double> samples, double q) {
  if (samples.empty()) return make_error(errc::invalid_argument, "percentile: no samples");
  if (!(q >= 0.0 && q <= 1.0)) {
    return make_error(errc::invalid_argument,
                      "percentile: q must lie in [0, 1], got " + std::to_string(q));
  }
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = rank < 1.0 ? 0 : static_cast<size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

result<latency_summary> summarize_latency(std::span<const double> samples) {
  auto p50 = percentile(samples, 0.5);
  if (!p50) return p50.error();
  auto p99 = percentile(samples, 0.99);
  if (!p99) return p99.error();
  return latency_summary{*p50, *p99, samples.size()};
}

result<double> ratio(double value, double baseline) {
  if (!(baseline > 0.0)) {
    return make_error(errc::invalid_argument,
                      "ratio: the baseline must be positive, got " + std::to_string(baseline));
  }
  return value / baseline;
}

}  // namespace kvc::cuda
