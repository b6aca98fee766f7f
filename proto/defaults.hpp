#pragma once
/// defaults: the built-in value of every setting that more than one layer exposes (the
/// coordinator's options, the embedding facades' configs, the launch config's schema and the
/// role processes' flags), written once here and read by each of them, so that a default
/// changed in one place is changed everywhere. The launch config's schema (launch_config.hpp,
/// docs/config.md) is where a user meets them.
///
/// Plain constants; thread-safe.
#include <cstdint>

namespace kvc::defaults {

/// A job not completed this long after its step was planned fails: far above a healthy
/// transfer (milliseconds) and an engine's stall, well below "forever".
inline constexpr uint32_t job_timeout_ms = 30'000;
/// A job not completed once this many later steps were planned fails.
inline constexpr uint32_t job_timeout_steps = 1000;
/// How often a process tells its peers it is alive.
inline constexpr uint32_t heartbeat_ms = 100;
/// Silence after which a peer counts as lost.
inline constexpr uint32_t connection_timeout_ms = 1000;
/// How long the scheduler may take to accept a worker's registration.
inline constexpr uint32_t register_timeout_ms = 5000;
/// How long an engine waits for every rank to register.
inline constexpr uint32_t ready_timeout_ms = 30'000;
/// How long an engine waits for one step's output; above job_timeout_ms, so that a lost report
/// fails its jobs at their deadline instead of ending the run.
inline constexpr uint32_t step_timeout_ms = 60'000;
/// How long stopping the workers may take.
inline constexpr uint32_t stop_timeout_ms = 5000;
/// Tokens per GPU block.
inline constexpr uint32_t gpu_block_size = 16;
/// Where the scheduler listens and the workers reach it.
inline constexpr const char* host = "127.0.0.1";
/// Names a node's shm segment when nothing else does: /kvc-<uid>-<instance>-node<node>.
inline constexpr const char* instance = "default";
/// The copy engine's backend.
inline constexpr const char* backend = "sim";

static_assert(step_timeout_ms > job_timeout_ms, "a step wait must outlast the job deadline");

}  // namespace kvc::defaults
