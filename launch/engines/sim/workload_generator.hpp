#pragma once
/// workload_generator: the simulated engine's requests, drawn from the launch config's
/// `workload` section and its seed. Pure and deterministic: every draw is a hash of (seed,
/// what is drawn, its index), so a request's prompt does not depend on the order of the calls
/// and the same seed gives the same workload on every machine (no std:: distributions, whose
/// results differ between standard libraries).
///
/// Arrivals: `requests` first turns, a Poisson number per step of mean `arrival_rate` (all at
/// step 1 when it is 0). A first turn's prompt is the first tokens of one of `documents` shared
/// documents, chosen with Zipf popularity (exponent `zipf`; a document's prefix length is drawn
/// once per document from `shared_prefix_tokens`), then unique tokens up to a length drawn from
/// `prompt_tokens`. Output lengths come from `output_tokens`. A finished turn comes back with
/// probability `multi_turn.probability` (up to `multi_turn.max_turns` turns) as a follow-up:
/// the whole conversation so far (prompt and outputs) plus a new user message.
///
/// Not thread-safe; owned by the engine's scheduler loop.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "launch/config/launch_config.hpp"

namespace kvc::sim {

/// One request as it arrives at the engine.
struct request_spec {
  std::string id;             ///< "c<conversation>.t<turn>"
  uint64_t conversation = 0;  ///< the first turn's index
  uint32_t turn = 0;          ///< 0 for a first turn
  std::vector<uint32_t> prompt;
  uint32_t max_new_tokens = 1;
  /// vLLM's kv_transfer_params do_remote_decode: a P/D prefill whose KV a decoder takes.
  bool do_remote_decode = false;
};

/// Token ids are below this (a vocabulary size).
inline constexpr uint32_t vocabulary = 32000;

class workload_generator {
 public:
  /// `max_tokens`: a follow-up whose prompt and output would exceed it is not generated (the
  /// conversation ends there; counted in truncated_conversations()).
  workload_generator(const launch::workload_section& w, uint32_t max_tokens);

  /// The first turns arriving at `step` (steps count from 1; call each step once, in order).
  std::vector<request_spec> arrivals(uint64_t step);
  /// First turns not yet arrived.
  uint64_t pending_first_turns() const noexcept { return w_.requests - issued_; }

  /// The next turn after turn `turn` of `conversation` finished, or nullopt (the conversation
  /// ends). `tokens`: the whole finished turn, prompt then outputs.
  std::optional<request_spec> follow_up(uint64_t conversation, uint32_t turn,
                                        std::span<const uint32_t> tokens);
  uint64_t truncated_conversations() const noexcept { return truncated_; }

  /// A Zipf draw over [0, documents) for the uniform `u` in [0, 1): tests check the shape.
  uint32_t document_for(double u) const;
  /// The tokens of document d's shared prefix (its length is drawn once per document).
  std::vector<uint32_t> document_prefix(uint32_t d) const;

 private:
  uint64_t draw(uint64_t what, uint64_t a, uint64_t b = 0) const noexcept;
  double unit(uint64_t what, uint64_t a, uint64_t b = 0) const noexcept;
  uint32_t in_range(const launch::token_range& r, uint64_t what, uint64_t a) const noexcept;
  uint64_t poisson(uint64_t step) const;
  request_spec first_turn(uint64_t index) const;

  launch::workload_section w_;
  uint32_t max_tokens_;
  std::vector<double> zipf_cdf_;  ///< cumulative popularity, normalised to 1
  uint64_t issued_ = 0;
  uint64_t truncated_ = 0;
};

}  // namespace kvc::sim
