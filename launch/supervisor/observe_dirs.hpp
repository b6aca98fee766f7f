#pragma once
/// observe_dirs: the directories a launch's processes write their trace files and run record
/// into (observe.trace_dir, observe.record_dir), made by the node's launcher before anything
/// starts, so that a directory that cannot be made is one clear error (exit 2, nothing
/// started) rather than a process failing mid-start. Missing ones are created 0700
/// (proto/private_files.hpp); the processes then find them there.
/// Free function; thread-safe.
#include <cstdint>

#include "launch/config/launch_config.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// Makes the trace directory (when observe.trace is not off) and, on node 0 (where the
/// scheduler records), the record directory (when observe.record). errc::io_error naming the
/// config key, the directory and why.
status make_observe_dirs(const launch_config& c, uint32_t node);

}  // namespace kvc::launch
