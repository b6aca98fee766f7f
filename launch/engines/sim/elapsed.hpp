#pragma once
/// ns_since: the wall time the simulated engine measures (a step's time, the model's and the
/// copies' share of it, a run's length), in nanoseconds on steady_clock. Only the engine's
/// reports read it; the simulated clock and every decision stay apart from it. Thread-safe.
#include <chrono>

namespace kvc::sim {

/// Nanoseconds from `t0` to now, on steady_clock.
inline double ns_since(std::chrono::steady_clock::time_point t0) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count());
}

}  // namespace kvc::sim
