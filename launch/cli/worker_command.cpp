// `kvconnect worker --rank R --port P`: one rank's worker process. Registers with the scheduler
// at --host:--port, then attaches the node's shm pool, builds a synthetic KV cache on the chosen
// copy engine and executes every step it receives. Prints {"event":"registered",...}; exits 0
// when the scheduler stops it (or on SIGINT/SIGTERM), 2 when its registration fails, 1 otherwise.
// With --config the options come from a launch config for --rank (node_processes.hpp: what
// `kvconnect launch` starts), and every other flag given overrides it.
#include <memory>

#include "launch/cli/commands.hpp"
#include "launch/cli/role_flags.hpp"
#include "launch/cli/role_processes.hpp"
#include "launch/roles/node_processes.hpp"

namespace kvc::launch {

void add_worker_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<worker_process_options>();
  auto config = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("worker", "Run one rank's worker (registers with the scheduler)");
  add_config_flag(*cmd, *config);
  add_topology_flags(*cmd, o->topology);
  add_pool_flags(*cmd, o->pool);
  add_network_flags(*cmd, o->token, o->network);
  add_trace_flags(*cmd, o->trace);
  cmd->add_option("--host", o->host, "The scheduler's address")->capture_default_str();
  cmd->add_option("--port", o->port, "The scheduler's port")->required();
  cmd->add_option("--rank", o->rank, "Global rank = pp_rank * tp_size + tp_rank")->required();
  cmd->add_option("--incarnation", o->incarnation,
                  "Restart count of this rank (must grow when a rank restarts)")
      ->capture_default_str();
  cmd->add_option("--backend", o->backend, "Copy engine: sim or cuda")->capture_default_str();
  cmd->add_option("--device", o->device, "CUDA device ordinal")->capture_default_str();
  cmd->add_flag("!--no-prefault", o->prefault, "Do not fault the rank's pool region in");
  cmd->add_option("--register-timeout-ms", o->register_timeout_ms,
                  "How long the scheduler may take to answer the registration")
      ->capture_default_str();
  add_fault_flags(*cmd, o->faults);
  cmd->add_option("--executor", o->executor,
                  "The simulated engine's executor channel (tcp://host:port): run its model")
      ->capture_default_str();
  cmd->add_option("--gpu-block-size", o->gpu_block_size, "Tokens per GPU block (with --executor)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  cmd->callback([o, cmd, config, &exit_code] {
    exit_code = apply_role_config(*cmd, *config, o->token, "worker",
                                  [&](const config_input& in) -> status {
                                    auto from = worker_options_of(in.config, in.plan, o->rank);
                                    if (!from) return from.error();
                                    *o = std::move(from).value();
                                    return status::success();
                                  });
    if (exit_code == 0) exit_code = run_worker_process(*o);
  });
}

}  // namespace kvc::launch
