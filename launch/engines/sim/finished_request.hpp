#pragma once
/// finished_request: one request that produced every output token, with its simulated times.
/// The simulated engine's TTFT and throughput count these and nothing else (an aborted request
/// is in neither), and a comparison of two runs pairs them by id (run_comparison.hpp): a
/// request's id names the same prompt in every run of a workload.
///
/// Plain data.
#include <cstdint>
#include <string>

namespace kvc::sim {

struct finished_request {
  std::string id;              ///< workload_generator's "c<conversation>.t<turn>"
  double arrival_us = 0;       ///< simulated time it arrived
  double first_token_us = 0;   ///< end of the step that sampled its first output token
  double finish_us = 0;        ///< end of the step that sampled its last one
  uint32_t output_tokens = 0;  ///< every one it was asked for
  /// Tokens computed for it as prefill (its prompt less the GPU and CPU hits, and whatever a
  /// preemption or a failed load made it compute again).
  uint64_t prefill_tokens = 0;

  double ttft_us() const noexcept { return first_token_us - arrival_us; }
  friend bool operator==(const finished_request&, const finished_request&) = default;
};

}  // namespace kvc::sim
