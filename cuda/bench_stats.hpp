#pragma once
/// bench_stats: the statistics the copy benchmark reports (percentiles of submit latency, ratios
/// against a baseline measured in the same run). Pure functions on plain numbers, so that they
/// are unit-tested without a device. Thread-safe (no state).
#include <cstddef>
#include <span>

#include "proto/status.hpp"

namespace kvc::cuda {

/// Nearest-rank percentile: the smallest sample with at least `q` of all samples at or below it
/// (q = 0.5: the median's lower neighbour for an even count; q = 1: the maximum). Copies and
/// sorts `samples`. errc::invalid_argument for no samples or q outside [0, 1].
result<double> percentile(std::span<const double> samples, double q);

/// Submit latency as the bench prints it.
struct latency_summary {
  double p50 = 0.0;
  double p99 = 0.0;
  size_t samples = 0;
};
/// p50 and p99 of `samples`; errc::invalid_argument when empty.
result<latency_summary> summarize_latency(std::span<const double> samples);

/// value / baseline; errc::invalid_argument when the baseline is not positive (a ratio against
/// nothing would read as infinitely fast).
result<double> ratio(double value, double baseline);

}  // namespace kvc::cuda
