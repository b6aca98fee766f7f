#pragma once
/// step_core: the coordinator's core as the coordinator actor drives it, the seam where
/// something that watches every input attaches once. step_coordinator is the core itself; a
/// decorator (leveldb EnvWrapper style) wraps another step_core, passes every call on and does
/// its own work around it: record::recording_core writes each input into the run record right
/// where the core consumes it. The coordinator actor holds one step_core and never knows which
/// (blocking_coordinator::wrap_core).
///
/// One call per input (a rank's report, a rank event, a step's expect, a tick, a poll, the
/// jobs the engine decided itself), never one per block. Not thread-safe: the coordinator
/// actor's thread calls everything.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/ids.hpp"
#include "proto/step_report.hpp"

namespace kvc::coordinator {

class step_coordinator;

/// Something the coordinator decided that is worth a log line.
struct coordinator_note {
  enum class level : uint8_t { debug = 0, info = 1, warn = 2 };
  level lvl = level::info;
  std::string text;
};

class step_core {
 public:
  virtual ~step_core() = default;

  /// The inputs (step_coordinator.hpp says what each does).
  virtual void report(const step_report& r) = 0;
  virtual void expect(const connector_metadata& meta, uint64_t now) = 0;
  virtual void rank_up(rank_id rank, uint32_t incarnation) = 0;
  virtual void rank_down(rank_id rank) = 0;
  virtual void tick(uint64_t now) = 0;
  virtual void forget_jobs(std::span<const job_id> jobs) = 0;
  virtual std::optional<connector_output> poll_output() = 0;

  virtual bool needs_tick() const noexcept = 0;
  virtual std::vector<coordinator_note> take_notes() = 0;
  /// The core's state, read-only (counters, the aggregator's tables).
  virtual const step_coordinator& state() const noexcept = 0;
};

}  // namespace kvc::coordinator
