#pragma once
/// replayer: re-drives a fresh scheduler::planner and coordinator::step_coordinator, built from
/// a record's header config, with the record's events in order (run_record.hpp), and compares
/// what they answer with what the recorded run's cores answered: every step's ConnectorMetadata
/// and every released output, field by field (their digests), plus the planner's answers to
/// the engine's calls. Stops at the first divergence.
///
/// Pure: no I/O, no clock (the recorded `now` values are replayed); lines for the user go to a
/// callback. Not thread-safe: one call at a time per replayer (it holds no state between).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "actors/record/run_record.hpp"
#include "proto/status.hpp"

namespace kvc::record {

/// Where the replay first answered otherwise than the recorded run.
struct divergence {
  uint64_t event = 0;  ///< index of the event in the record (0: the first after the header)
  step_id step = 0;    ///< the step being planned then (the last build's)
  std::string field;   ///< e.g. "metadata.stores", "output.jobs", "match.tokens"
  std::string detail;  ///< recorded vs replayed
};

struct replay_result {
  uint64_t steps = 0;    ///< build events replayed
  uint64_t outputs = 0;  ///< outputs released and compared
  std::optional<divergence> first;
};

/// Replays `rec`. `line` gets one line per step ("step N digest XXXXXXXXXXXXXXXX") and per
/// released output ("output N digest XXXXXXXXXXXXXXXX"); may be empty. Errors (nothing
/// replayed): the header's config does not build a planner or coordinator.
result<replay_result> replay(const run_record& rec,
                             const std::function<void(std::string_view)>& line);

/// A divergence as one line: "divergence at step N (event E, <name>): FIELD differs: DETAIL".
std::string describe(const divergence& d);

}  // namespace kvc::record
