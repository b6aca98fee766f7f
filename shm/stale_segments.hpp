#pragma once
/// stale_segments: sweeps the kvconnect segments a crashed run left behind. A segment of one
/// user (`/kvc-<uid>-*` in /dev/shm) is stale when its creator is gone (segment::stale_creator:
/// the pid is dead or was recycled); those are removed. A segment whose creator lives (a
/// running launch, on this node or any other user's) is never touched, nor one whose header is
/// still being written. `kvconnect launch` sweeps at its start; `kvconnect cleanup` on demand.
///
/// Free function, thread-safe (reads /dev/shm and /proc). The check and the removal are two
/// steps: a creator replacing the same stale name in between (segment::create does the same
/// sweep for its own name) could lose its new segment; launches use distinct instance names.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "proto/status.hpp"

namespace kvc::shm {

struct stale_sweep {
  struct removed_segment {
    std::string name;  ///< "/kvc-<uid>-<instance>-node<n>"
    pid_t creator = 0;
  };
  std::vector<removed_segment> removed;
  /// Segments that could not be looked at or removed, one message each.
  std::vector<std::string> problems;
};

/// Removes user `uid`'s stale segments. errc::io_error when /dev/shm cannot be read.
result<stale_sweep> remove_stale_segments(uint32_t uid);

/// Removes `name` only when it is a kvconnect segment whose header names `creator` and that
/// creator is gone: what a launcher does after its scheduler (`creator`) ended, so that it
/// removes the segment its scheduler left and never one that another live process created
/// under the same name (a second launch of the same instance is refused, and must leave the
/// first launch's segment alone). True when removed; false when absent, live, being created,
/// or another creator's. Errors: a bad name, a segment that cannot be read or removed.
result<bool> remove_segment_left_by(std::string_view name, pid_t creator);

}  // namespace kvc::shm
