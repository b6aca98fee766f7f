#pragma once
/// Identity of a process that survives pid reuse: the pid plus its start time
/// (/proc/<pid>/stat field 22, clock ticks since boot). Used to tell a stale shared-memory
/// segment (creator dead) from a live one. Free functions, thread-safe (they read /proc).
#include <cstdint>
#include <sys/types.h>

#include "proto/status.hpp"

namespace kvc::shm {

/// Start time of `pid` (field 22 of /proc/<pid>/stat). errc::not_found when there is no such
/// process, errc::io_error when the file cannot be parsed.
result<uint64_t> process_start_time(pid_t pid);

/// True when `pid` exists (kill(pid, 0) succeeds or fails with EPERM), is not a zombie, and
/// started at `start_time`; a recycled pid has another start time and counts as dead.
bool process_alive(pid_t pid, uint64_t start_time);

}  // namespace kvc::shm
