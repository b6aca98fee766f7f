#pragma once
/// tier_dirs: the check, on the node before anything starts, that every file tier of
/// `offload.secondary_tiers` can be used: its root_dir exists, is a directory, is writable (not
/// on a read-only file system, not denied) and lies on a file system at least capacity_bytes
/// large. A tier that fails is one clear error naming the key, the directory and why (the
/// launcher exits 2, nothing started), rather than a worker failing mid-run.
/// Free function; thread-safe (it reads the file system only).
#include "launch/config/launch_config.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// errc::io_error "offload.secondary_tiers[i].root_dir: DIR ..." for the first tier that cannot
/// be used; errc::capacity_exhausted "offload.secondary_tiers[i].capacity_bytes: ..." when its
/// file system is smaller than capacity_bytes. Success when there is no tier.
status check_tier_dirs(const launch_config& c);

}  // namespace kvc::launch
