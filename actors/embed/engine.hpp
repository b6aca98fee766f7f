#pragma once
/// The engine seam: what drives the two facades, as an engine holds it. An engine is two parts:
/// one `scheduler_engine` on the engine's scheduler thread (it drives the scheduler_connector:
/// waits for the ranks, schedules and plans the steps, applies their output) and one
/// `rank_engine` per rank on that rank's worker thread or process (it drives the
/// worker_connector step by step, around the rank's forward, until the engine stops it). A
/// program holds each part through these interfaces only and never asks which engine it holds:
/// the example engine (launch/engines/example/, docs/embedding.md) holds its own two parts
/// through them, and the `kvconnect` role processes hold theirs (serve, smoke, sim) through
/// launch::scheduler_engine / launch::rank_engine, which add only what a role process needs
/// (launch/engines/engine.hpp).
///
/// The calls, in order:
///   scheduler side   configure(cfg)                 before scheduler_connector::create(cfg)
///                    run(sc)                        on the scheduler thread; the exit code
///   each rank        worker_connector::prepare(cfg)
///                    prepare(wc)                    its KV cache, before the registration
///                    wc.register_with_scheduler()
///                    run(wc)                        on the rank's thread or process
/// How the ranks learn each step's model input (which requests run, their blocks) is the
/// engine's own business (vLLM: its executor), as is what stops a rank's run.
///
/// Not thread-safe: each part is called by the one thread that drives its facade.
#include "actors/embed/embed_config.hpp"
#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

/// The scheduler side of an engine: one per scheduler_connector.
class scheduler_engine {
 public:
  virtual ~scheduler_engine() = default;
  /// What the engine's model fixes (the planner's block sizes and policy, the pool's slot size
  /// when the engine knows its KV layout), into `cfg` before the connector is created.
  virtual void configure(scheduler_connector_config& cfg) const = 0;
  /// Drives the connector: waits for every rank, runs the engine's steps until they end (or
  /// what ends the engine early). The exit code so far (0: the run passed).
  virtual int run(scheduler_connector& sc) = 0;
};

/// The rank side of an engine: one per worker_connector.
class rank_engine {
 public:
  virtual ~rank_engine() = default;
  /// Before registration: sets up what the rank's steps need (its KV cache, registered with
  /// register_kv_caches; a model runner). A failure is the rank's set-up failure.
  virtual status prepare(worker_connector& wc) = 0;
  /// Drives the connector step by step (embed::run_worker_step, worker_step.hpp) until the
  /// engine or the scheduler stops it; what ended it (errc::device_unavailable: the device is
  /// lost, the rank's process must end).
  virtual status run(worker_connector& wc) = 0;
};

}  // namespace kvc::embed
