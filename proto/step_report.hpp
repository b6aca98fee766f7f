#pragma once
/// step_report: one rank's report of one engine step, the only shape a report has. It carries
/// the completion events the rank observed in that step (possibly none) and closes the step for
/// the rank: every rank sends exactly one per step, in step order, after its registration was
/// accepted (docs/protocol.md "Step channel").
///
/// The inspect overload lets the wire codec serialise it without proto/ depending on CAF.
#include <cstdint>
#include <vector>

#include "proto/completion.hpp"
#include "proto/ids.hpp"

namespace kvc {

struct step_report {
  rank_id rank = 0;
  uint32_t incarnation = 0;
  step_id step = 0;
  std::vector<completion_event> events;

  friend bool operator==(const step_report&, const step_report&) = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, step_report& x) {
  return f(x.rank, x.incarnation, x.step, x.events);
}

}  // namespace kvc
