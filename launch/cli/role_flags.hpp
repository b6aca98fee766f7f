#pragma once
/// role_flags: the command-line flags of the role processes (`kvconnect scheduler`, `kvconnect
/// worker`) bound to their options (role_options.hpp), and --config: the options taken from a
/// launch config (node_processes.hpp maps it), every flag given on the command line applied on
/// top. Used by scheduler_command.cpp and worker_command.cpp.
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "launch/roles/role_options.hpp"
#include "proto/status.hpp"

namespace kvc::launch {

/// --tp-size, --pp-size, --node.
void add_topology_flags(CLI::App& cmd, topology_options& topo);
/// --instance, --slots, --kv-layers, --kv-page-bytes, --gpu-blocks, --block-factor.
void add_pool_flags(CLI::App& cmd, pool_options& pool);
/// --fault (repeatable), --fault-seed.
void add_fault_flags(CLI::App& cmd, fault_options& faults);
/// --trace DIR, --trace-level messages|jobs.
void add_trace_flags(CLI::App& cmd, trace_options& trace);
/// --token (or $KVCONNECT_TOKEN), --heartbeat-ms, --connection-timeout-ms.
void add_network_flags(CLI::App& cmd, std::string& token, network_options& net);
/// --config FILE (`-`: standard input): the launch config (docs/config.md) the options come
/// from; the other flags given override it.
CLI::Option* add_config_flag(CLI::App& cmd, std::string& path);

/// Loads the launch config at `path` (`-`: standard input) through the loader of `kvconnect
/// launch` and derives its plan for `token`; the instance is runtime.instance, else
/// defaults::instance. The config's errors are printed ("kvconnect <who>: ..."), the result
/// is then errc::invalid_argument.
result<config_input> load_role_config(const std::string& path, const std::string& token,
                                      const std::string& who);

/// Under --config `path` (empty: none, 0): loads it (load_role_config), lets `fill` set the
/// command's options from it, then runs again the callbacks of every option of `cmd` given on
/// the command line (or through its environment variable), so that the flags override the
/// config. 0, or 2 with the error printed ("kvconnect <who>: ...") when the config or `fill`
/// fails.
int apply_role_config(CLI::App& cmd, const std::string& path, const std::string& token,
                      const std::string& who,
                      const std::function<status(const config_input&)>& fill);

}  // namespace kvc::launch
