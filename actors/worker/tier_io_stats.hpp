#pragma once
/// tier_io_stats: what one rank's file tier I/O counted (worker::tier_executor), cumulative.
/// Plain data; a public header of the embedding API (worker_connector::tier_stats).
#include <cstdint>

namespace kvc::worker {

struct tier_io_stats {
  uint64_t bytes_written = 0;  ///< KV bytes of completed cascades' blocks
  uint64_t bytes_read = 0;     ///< KV bytes of completed promotions' blocks
  uint64_t blocks_failed = 0;  ///< block I/Os that failed (job failures count per block)
  /// Block I/Os of flushed jobs withdrawn before they started (tier_executor, "Flush").
  uint64_t blocks_cancelled = 0;
  uint64_t removals = 0;
  uint64_t removals_failed = 0;
  friend bool operator==(const tier_io_stats&, const tier_io_stats&) = default;
};

}  // namespace kvc::worker
