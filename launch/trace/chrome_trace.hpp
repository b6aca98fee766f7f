#pragma once
/// chrome_trace: a run's trace records (trace_file.hpp) as one Chrome trace-event JSON document
/// (the format ui.perfetto.dev, chrome://tracing and speedscope open), for `kvconnect trace
/// export`.
///
/// Every process is a `pid` (named "<role> pid <pid> node <node>"), every track of it a `tid`
/// ("scheduler", "rank 3", the file tier's "tier promotion", "tier cascade", "tier check"). On
/// each track: a complete slice (`ph: X`) per handler span
/// (build_connector_meta, output_applied, a rank's step from bind to report) and a zero-length
/// slice per message sent or received or control event; a flow (`ph: s` at the send, `ph: f`
/// with `bp: e` at the receive, one id) from each send to its receive, for messages seen at both
/// ends only; per copy job an async slice (`ph: b` / `e`, category "job") from the rank taking
/// it on to its completion, per file tier job one (category "tier", on its kind's track) from
/// planned to applied; counters (`ph: C`): the planner's jobs in flight, the CPU pool's slots
/// used (records "pool_slots", at trace level jobs), each rank's and each tier track's jobs in
/// flight. Times are microseconds from the run's first record, on the reference process's clock
/// (clock_offsets.hpp). Events are sorted per track by time, enclosing slices first.
///
/// Pure; thread-safe.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/trace/clock_offsets.hpp"
#include "launch/trace/trace_file.hpp"

namespace kvc::launch {

/// Every send and its receive, with their records (indexes into set.records).
struct linked_message {
  size_t send = 0;
  size_t receive = 0;
};

/// Messages whose id was seen sent once and received once (the first of each when repeated).
std::vector<linked_message> link_messages(const trace_set& set);

/// The message pairs of `links`, on each process's own monotonic clock.
std::vector<message_pair> message_pairs(const trace_set& set,
                                        const std::vector<linked_message>& links);

/// Offsets per process onto process 0's clock: from wall clocks first, then from the messages.
std::vector<int64_t> estimate_set_offsets(const trace_set& set,
                                          const std::vector<linked_message>& links);

/// The document: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}.
nlohmann::json to_chrome_trace(const trace_set& set);

}  // namespace kvc::launch
