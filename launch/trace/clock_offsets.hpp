#pragma once
/// clock_offsets: brings every process's clock onto one (the reference process's) from the
/// messages they exchanged, for `kvconnect trace export` and `summary`.
///
/// For processes a and b with clocks that differ by θ = clock_b − clock_a, a message a→b gives
/// recv_b − send_a = delay + θ and one b→a gives recv_a − send_b = delay − θ. The smallest of
/// each (the least delayed message) bounds θ; with both directions θ = (min_ab − min_ba) / 2
/// (NTP's estimate: the one-way delays are taken as equal), with one direction only θ is the
/// bound itself (a delay of zero: no receive before its send). Offsets follow from the
/// reference along these links (breadth first, the most-linked pairs first); a process without
/// a link to the reference keeps the offset it was given (from wall clocks).
///
/// Pure; thread-safe.
#include <cstdint>
#include <span>
#include <vector>

namespace kvc::launch {

/// One message seen at both ends, each time on its own process's clock.
struct message_pair {
  uint32_t sender = 0;
  uint32_t receiver = 0;
  int64_t send_ns = 0;
  int64_t recv_ns = 0;
};

/// Per process, what to add to its times to put them on the clock of process `reference`.
/// `initial` (same size as the number of processes, or empty: zeros) is kept for processes the
/// pairs do not link to the reference. Pairs naming processes out of range are ignored.
std::vector<int64_t> estimate_offsets(uint32_t processes, std::span<const message_pair> pairs,
                                      uint32_t reference, std::vector<int64_t> initial = {});

}  // namespace kvc::launch
