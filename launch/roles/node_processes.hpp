#pragma once
/// node_processes: the one mapping from a launch config to the role processes' options, and the
/// command lines `kvconnect launch` starts on one node. A child gets the plan, not flags rebuilt
/// from it: the launch's config as YAML on its standard input (`--config -`; runtime.instance
/// resolved, the token left out: it travels in $KVCONNECT_TOKEN, as other users can read a
/// command line but not another user's environment or pipes) plus what only the run knows (the
/// scheduler's engine; a worker's rank, the scheduler's port, its incarnation, the executor
/// channel's endpoint). The child maps the config with scheduler_options_of / worker_options_of,
/// the same functions a test calls, so both sides of a node derive one pool and the worker's
/// layout checksum matches the segment. Injected faults (runtime.faults) go to the processes
/// they concern: the channel's to the scheduler, a rank's copy faults to its worker
/// (fault_options.hpp).
///
/// Pure: argument lists (without the binary's path), YAML text and option structs.
#include <cstdint>
#include <string>
#include <vector>

#include "launch/config/launch_config.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/roles/role_options.hpp"

namespace kvc::launch {


/// The YAML a child reads on its standard input: `config` with runtime.instance = `instance`
/// and no token. Loading it back gives that config.
std::string child_config_yaml(const launch_config& config, const std::string& instance);

/// `scheduler --config - --engine smoke|sim`.
std::vector<std::string> scheduler_arguments(engine_kind engine);

/// `worker --config - --rank R --port P --incarnation I [--executor E]`: rank `rank`,
/// registering with the scheduler at `port` as `incarnation` (0 at the start, + 1 at each
/// restart of the rank); with an `executor` endpoint, it runs the simulated engine's model
/// runner.
std::vector<std::string> worker_arguments(rank_id rank, uint16_t port, uint32_t incarnation = 0,
                                          const std::string& executor = {});

/// restart.policy is on-failure with a limit above 0: the launcher restarts failed workers and
/// the scheduler's smoke run waits for them (rank_restarts).
bool restarts_allowed(const launch_config& config);

/// The scheduler process's options (node 0) for `config` and its `plan`: topology, pool,
/// network and timeouts, the observe section, the channel's faults, rank_restarts under
/// on-failure, several nodes: the plan's rank → node map; `engine`, with the config and plan
/// (the simulated engine's workload) and smoke_steps = workload.steps (the smoke run's).
scheduler_process_options scheduler_options_of(const launch_config& config,
                                               const launch_plan& plan, engine_kind engine);

/// Rank `rank`'s worker options for `config` and its `plan`: its node, host, backend and
/// device, the shared topology, pool and network, the register timeout, its copy faults, the
/// GPU block size of the model runner. The port, incarnation and executor endpoint stay unset
/// (the run knows them). errc::invalid_argument when `rank` is outside the world.
result<worker_process_options> worker_options_of(const launch_config& config,
                                                 const launch_plan& plan, rank_id rank);

}  // namespace kvc::launch
