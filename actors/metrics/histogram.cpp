#include "actors/metrics/histogram.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace kvc::metrics {

result<histogram> histogram::create(std::vector<double> bounds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) {
      return make_error(errc::invalid_argument,
                        "metrics: histogram bounds must be finite and strictly increasing");
    }
  }
  return histogram{std::move(bounds)};
}

void histogram::observe(double v) noexcept {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

}  // namespace kvc::metrics
