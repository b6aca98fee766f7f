#pragma once
/// completion_stamper: turns one rank's job results into completion events by naming the sender
/// (rank, incarnation) and numbering them with the per-sender sequence number the coordinator
/// checks for gaps (from 0, no gaps, for the lifetime of one incarnation). Pure; not
/// thread-safe: one owner (the worker actor, or whoever reports for the rank).
#include <cstdint>
#include <span>
#include <vector>

#include "proto/completion.hpp"
#include "proto/ids.hpp"

namespace kvc::worker {

class completion_stamper {
 public:
  completion_stamper(rank_id rank, uint32_t incarnation) : rank_(rank), incarnation_(incarnation) {}

  /// One event per result, in order, observed in `step`, with consecutive sequence numbers.
  std::vector<completion_event> stamp(step_id step, std::span<const rank_job_result> jobs);

  rank_id rank() const noexcept { return rank_; }
  uint32_t incarnation() const noexcept { return incarnation_; }
  /// The sequence number of the next event.
  uint64_t next_seq() const noexcept { return next_seq_; }

 private:
  rank_id rank_;
  uint32_t incarnation_;
  uint64_t next_seq_ = 0;
};

}  // namespace kvc::worker
