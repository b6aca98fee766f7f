#pragma once
/// node_processes: the command lines `kvconnect launch` starts on one node, derived from the
/// config and its plan: the scheduler process (`kvconnect scheduler`, on the first node, with
/// the simulated engine's config or --smoke-steps = workload.steps; --rank-restarts under
/// restart.policy on-failure; several nodes: listening on the first node's host, --rank-nodes)
/// and one `kvconnect worker` per rank placed on the node (--incarnation: how often it
/// restarted). Both
/// get the same topology and pool flags, so the worker's layout checksum matches the segment.
/// The token is not on the command line (other users can read it there): the launcher passes
/// it as $KVCONNECT_TOKEN. Injected faults (runtime.faults) go to the processes they concern:
/// the channel's to the scheduler, a rank's copy faults to its worker (fault_options.hpp).
///
/// Pure: argument lists only (without the binary's path).
#include <cstdint>
#include <string>
#include <vector>

#include "launch/launch_config.hpp"
#include "launch/launch_plan.hpp"

namespace kvc::launch {

/// `scheduler ...` for the node that runs the scheduler: the smoke run (--smoke-steps), or with
/// `sim_engine` the simulated engine (--sim-engine-config: the config as YAML, its token left
/// out).
std::vector<std::string> scheduler_arguments(const launch_config& config, const launch_plan& plan,
                                             bool sim_engine = false);

/// restart.policy is on-failure with a limit above 0: the launcher restarts failed workers and
/// the scheduler's smoke run waits for them (--rank-restarts).
bool restarts_allowed(const launch_config& config);

/// `worker ...` for `rank`, registering with the scheduler at its host and `port` as
/// `incarnation` (0 at the start, + 1 at each restart of the rank); with an `executor`
/// endpoint, it runs the simulated engine's model runner (--executor, --gpu-block-size).
std::vector<std::string> worker_arguments(const launch_config& config, const launch_plan& plan,
                                          rank_id rank, uint16_t port, uint32_t incarnation = 0,
                                          const std::string& executor = {});

}  // namespace kvc::launch
