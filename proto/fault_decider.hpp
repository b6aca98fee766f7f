#pragma once
/// fault_decider: the pure decision half of the channel's injected faults (the copy engine's is
/// cuda::fault_injector). Fed one call per occurrence at its site (a rank's step report passing
/// the step channel's seam), it says which fault, if any, that occurrence gets.
///
/// Every spec whose scope (rank, step range) holds the occurrence counts it, from 0: that count
/// is the occurrence's ordinal for the spec. A spec fires on its `nth` ordinal, or on each with
/// probability p drawn from fault_draw(seed, spec index, ordinal), until it fired `max_fires`
/// times. The first spec (in order) that fires decides; the others still counted. So a decision
/// depends only on the seed, the specs and the occurrences in the spec's scope, never on other
/// draws. No threads, no clock, no global RNG: the same inputs give the same faults.
/// Not thread-safe: one owner.
#include <cstdint>
#include <optional>
#include <vector>

#include "proto/fault_plan.hpp"
#include "proto/ids.hpp"
#include "proto/status.hpp"

namespace kvc {

class fault_decider {
 public:
  struct firing {
    size_t spec = 0;  ///< index into config().specs
    fault_kind kind = fault_kind::drop_report;
    uint64_t ordinal = 0;  ///< the occurrence's count within the spec's scope
  };

  /// Keeps the specs of `config` acting at `site`. errc::invalid_argument for an invalid config.
  static result<fault_decider> make(const fault_config& config, fault_site site);

  /// The decision for the next occurrence of (rank, step); std::nullopt when no spec fires.
  std::optional<firing> next(rank_id rank, step_id step);

  /// A further deterministic draw in [0, 1) belonging to a firing (e.g. which bits to flip).
  double draw(const firing& f, uint64_t k) const noexcept;

  /// How often each kind fired.
  const fault_counts& fired() const noexcept { return fired_; }
  /// The specs at this decider's site, in order.
  const fault_config& config() const noexcept { return config_; }

 private:
  explicit fault_decider(fault_config config)
      : config_(std::move(config)),
        seen_(config_.specs.size(), 0),
        fires_(config_.specs.size(), 0) {}

  fault_config config_;
  std::vector<uint64_t> seen_;   ///< per spec: occurrences in scope so far
  std::vector<uint64_t> fires_;  ///< per spec
  fault_counts fired_{};
};

}  // namespace kvc
