#include "launch/engines/sim/workload_generator.hpp"

#include <algorithm>
#include <cmath>

#include "proto/block_key.hpp"

namespace kvc::sim {

namespace {

// What a draw is for: one stream per purpose.
enum : uint64_t {
  arrivals_stream = 1,
  document_stream,
  prefix_length_stream,
  prefix_token_stream,
  prompt_length_stream,
  unique_token_stream,
  output_length_stream,
  follow_up_stream,
  message_length_stream,
  message_token_stream,
};

}  // namespace

workload_generator::workload_generator(const launch::workload_section& w, uint32_t max_tokens)
    : w_(w), max_tokens_(max_tokens) {
  zipf_cdf_.resize(std::max<uint32_t>(w.documents, 1));
  double sum = 0;
  for (size_t k = 0; k < zipf_cdf_.size(); ++k) {
    sum += 1.0 / std::pow(static_cast<double>(k + 1), w.zipf);
    zipf_cdf_[k] = sum;
  }
  for (double& c : zipf_cdf_) c /= sum;
}

uint64_t workload_generator::draw(uint64_t what, uint64_t a, uint64_t b) const noexcept {
  return block_key::mix(
      block_key::mix(block_key::mix(w_.seed ^ (what * 0x9e3779b97f4a7c15ull)) ^ a) +
      b * 0xbf58476d1ce4e5b9ull);
}

double workload_generator::unit(uint64_t what, uint64_t a, uint64_t b) const noexcept {
  return static_cast<double>(draw(what, a, b) >> 11) * 0x1.0p-53;
}

uint32_t workload_generator::in_range(const launch::token_range& r, uint64_t what,
                                      uint64_t a) const noexcept {
  const uint64_t span = uint64_t{r.max} - r.min + 1;
  return r.min + static_cast<uint32_t>(draw(what, a) % span);
}

uint64_t workload_generator::poisson(uint64_t step) const {
  // Knuth's method in pieces of mean <= 16 (exp(-mean) stays far from underflow).
  uint64_t count = 0;
  uint64_t k = 0;
  for (double left = w_.arrival_rate; left > 0; left -= 16.0) {
    const double limit = std::exp(-std::min(left, 16.0));
    double p = 1.0;
    while (true) {
      p *= unit(arrivals_stream, step, k++);
      if (p <= limit) break;
      ++count;
    }
  }
  return count;
}

uint32_t workload_generator::document_for(double u) const {
  const auto it = std::upper_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u);
  return static_cast<uint32_t>(std::min<size_t>(it - zipf_cdf_.begin(), zipf_cdf_.size() - 1));
}

std::vector<uint32_t> workload_generator::document_prefix(uint32_t d) const {
  const uint32_t n = in_range(w_.shared_prefix_tokens, prefix_length_stream, d);
  std::vector<uint32_t> out(n);
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint32_t>(draw(prefix_token_stream, d, i) % vocabulary);
  }
  return out;
}

request_spec workload_generator::first_turn(uint64_t index) const {
  request_spec r;
  r.id = "c" + std::to_string(index) + ".t0";
  r.conversation = index;
  const uint32_t length = in_range(w_.prompt_tokens, prompt_length_stream, index);
  r.prompt = document_prefix(document_for(unit(document_stream, index)));
  if (r.prompt.size() >= length) r.prompt.resize(length - 1);  // one unique token at least
  for (uint32_t i = static_cast<uint32_t>(r.prompt.size()); i < length; ++i) {
    r.prompt.push_back(static_cast<uint32_t>(draw(unique_token_stream, index, i) % vocabulary));
  }
  r.max_new_tokens = in_range(w_.output_tokens, output_length_stream, index);
  return r;
}

std::vector<request_spec> workload_generator::arrivals(uint64_t step) {
  uint64_t n = 0;
  if (w_.arrival_rate <= 0) {
    n = step == 1 ? w_.requests : 0;
  } else {
    n = poisson(step);
  }
  n = std::min<uint64_t>(n, w_.requests - issued_);
  std::vector<request_spec> out;
  out.reserve(n);
  for (uint64_t i = 0; i < n; ++i) out.push_back(first_turn(issued_++));
  return out;
}

std::optional<request_spec> workload_generator::follow_up(uint64_t conversation, uint32_t turn,
                                                          std::span<const uint32_t> tokens) {
  const uint32_t next = turn + 1;
  if (next >= w_.multi_turn.max_turns) return std::nullopt;
  if (unit(follow_up_stream, conversation, next) >= w_.multi_turn.probability) {
    return std::nullopt;
  }
  request_spec r;
  r.conversation = conversation;
  r.turn = next;
  r.id = "c" + std::to_string(r.conversation) + ".t" + std::to_string(next);
  const uint64_t key = (r.conversation << 10) ^ next;
  const uint32_t message = in_range(w_.output_tokens, message_length_stream, key);
  r.max_new_tokens = in_range(w_.output_tokens, output_length_stream, key + (1ull << 63));
  if (uint64_t{tokens.size()} + message + r.max_new_tokens > max_tokens_) {
    ++truncated_;
    return std::nullopt;
  }
  r.prompt.assign(tokens.begin(), tokens.end());
  for (uint32_t i = 0; i < message; ++i) {
    r.prompt.push_back(static_cast<uint32_t>(draw(message_token_stream, key, i) % vocabulary));
  }
  return r;
}

}  // namespace kvc::sim
