#pragma once
/// tier_dirs: the checks, on the node before anything starts, that every file tier of
/// `offload.secondary_tiers` can be used: its root_dir exists, is a directory, is writable (not
/// on a read-only file system, not denied) and lies on a file system at least capacity_bytes
/// large (check_tier_dirs, from the config alone); and, once the run is planned, that the file
/// system has room for capacity_bytes of every rank of the node (check_tier_space). A tier that
/// fails is one clear error naming the key, the directory and why (the launcher exits 2,
/// nothing started), rather than a worker failing mid-run.
/// Free functions; thread-safe (they read the file system only).
#include <cstdint>
#include <span>

#include "launch/config/launch_config.hpp"
#include "launch/config/launch_plan.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// errc::io_error "offload.secondary_tiers[i].root_dir: DIR ..." for the first tier that cannot
/// be used; errc::capacity_exhausted "offload.secondary_tiers[i].capacity_bytes: ..." when its
/// file system is smaller than capacity_bytes. Success when there is no tier.
status check_tier_dirs(const launch_config& c);

/// Each rank keeps up to capacity_bytes of block files (`<root_dir>/<run digest>/<rank>/`), so
/// `ranks` (those of the node) need capacity_bytes × their count. errc::capacity_exhausted
/// "offload.secondary_tiers[0].capacity_bytes: ..." naming the bytes needed, free and held when
/// the file system's free space (for an unprivileged user) plus what this run's files of these
/// ranks already hold (a restart's blocks, which the tier keeps) is less. errc::io_error when
/// the directory cannot be read. Success without a tier or without a rank.
status check_tier_space(const launch_plan& plan, std::span<const rank_id> ranks);

}  // namespace kvc::launch
