#pragma once
/// histogram: a Prometheus histogram's state: fixed upper bounds, a count per bucket, the sum
/// and count of the observations. observe() is a few compares and adds, cheap enough for every
/// transfer. Values are copied into published snapshots (scheduler_metrics).
///
/// Pure; not thread-safe (one owner, copies travel).
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "proto/status.hpp"

namespace kvc::metrics {

class histogram {
 public:
  histogram() = default;
  /// Bounds strictly increasing and finite; errc::invalid_argument otherwise.
  static result<histogram> create(std::vector<double> bounds);

  /// Counts v in the first bucket whose bound is >= v (or in the +Inf bucket).
  void observe(double v) noexcept;

  std::span<const double> bounds() const noexcept { return bounds_; }
  /// counts()[i]: observations in bucket i alone (not cumulative); the last is the +Inf bucket.
  std::span<const uint64_t> counts() const noexcept { return counts_; }
  double sum() const noexcept { return sum_; }
  uint64_t count() const noexcept { return count_; }

 private:
  explicit histogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(1, 0);
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

}  // namespace kvc::metrics
