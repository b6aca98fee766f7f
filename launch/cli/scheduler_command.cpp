// `kvconnect scheduler`: the scheduler and the coordinator of one node, in one process. Creates
// the node's shm segment, publishes the scheduler on --host (127.0.0.1) and prints
// {"event":"listening","port":N,...}; runs the engine --engine names (engine_traits.hpp:
// serve until SIGINT/SIGTERM; --smoke-steps alone picks the smoke run). With --config the
// options come from a launch config (node_processes.hpp: what `kvconnect launch` starts) and
// every flag given overrides it.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "launch/cli/commands.hpp"
#include "launch/cli/role_flags.hpp"
#include "launch/cli/role_processes.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/roles/node_processes.hpp"

namespace kvc::launch {

void add_scheduler_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<scheduler_process_options>();
  auto config = std::make_shared<std::string>();
  auto engine = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand(
      "scheduler", "Run the scheduler and the coordinator of one node (creates its shm pool)");
  add_config_flag(*cmd, *config);
  auto* engine_flag =
      cmd->add_option("--engine", *engine,
                      "serve (the default); smoke (--smoke-steps, with --config workload.steps, "
                      "store/load steps); sim (with --config: the simulated engine runs the "
                      "config's workload, then stops the workers)")
          ->check(CLI::IsMember(engine_names(false)));
  add_topology_flags(*cmd, o->topology);
  add_pool_flags(*cmd, o->pool);
  add_network_flags(*cmd, o->token, o->network);
  add_trace_flags(*cmd, o->trace);
  cmd->add_option("--host", o->host, "The address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port on --host; 0 picks a free one (printed)")
      ->capture_default_str();
  cmd->add_flag("--prefault", o->prefault, "Fault the whole pool in at creation");
  cmd->add_option("--job-timeout-ms", o->job_timeout_ms,
                  "Fail a job not completed this long after its step (0: no time deadline)")
      ->capture_default_str();
  cmd->add_option("--job-timeout-steps", o->job_timeout_steps,
                  "Fail a job not completed this many steps after its step (0: no step deadline)")
      ->capture_default_str();
  auto* smoke_flag =
      cmd->add_option("--smoke-steps", o->smoke_steps,
                      "The smoke run (alone, it picks --engine smoke): once every rank "
                      "registered, drive this many store/load steps, check the pool, stop the "
                      "workers and exit")
          ->capture_default_str();
  cmd->add_option("--ready-timeout-ms", o->ready_timeout_ms,
                  "Smoke / simulated engine: how long every rank may take to register")
      ->capture_default_str();
  cmd->add_option("--step-timeout-ms", o->step_timeout_ms,
                  "Smoke / simulated engine: how long one step's output may take (must exceed "
                  "--job-timeout-ms)")
      ->capture_default_str();
  cmd->add_option("--rank-nodes", o->rank_nodes,
                  "Several nodes: the node of every rank, comma-separated (the scheduler runs on "
                  "node 0 and serves them all)")
      ->delimiter(',');
  cmd->add_flag("--rank-restarts", o->rank_restarts,
                "Smoke: a lost rank may come back with a higher incarnation (its failed jobs are "
                "counted, the run waits for it)");
  cmd->add_option("--stop-timeout-ms", o->stop_timeout_ms,
                  "How long stopping the workers may take at shutdown")
      ->capture_default_str();
  cmd->add_flag("--serve-after-smoke", o->serve_after_smoke,
                "After the smoke steps, keep serving (metrics, KV-event replay) until "
                "SIGINT/SIGTERM");
  cmd->add_option("--metrics-port", o->metrics_port,
                  "Serve GET /metrics (Prometheus text) on --host at this port (0: off)")
      ->capture_default_str();
  cmd->add_option("--kv-events-endpoint", o->kv_events_endpoint,
                  "Publish the CPU tier's KV events (vLLM's wire format) on a ZeroMQ PUB "
                  "socket bound here, e.g. tcp://*:5557 (the real address is printed)");
  cmd->add_option("--kv-events-replay-endpoint", o->kv_events_replay_endpoint,
                  "Serve missed KV-event batches on a ZeroMQ ROUTER socket bound here");
  cmd->add_option("--kv-events-topic", o->kv_events_topic,
                  "Topic frame of every KV-event batch (default: empty)");
  cmd->add_option("--record", o->record_dir,
                  "Record the run's inputs for `kvconnect replay-run` into this directory "
                  "(observe.record)");
  add_fault_flags(*cmd, o->faults);
  cmd->callback([o, cmd, config, engine, engine_flag, smoke_flag, &exit_code] {
    auto kind = scheduler_engine_of_flags(
        engine_flag->count() > 0 ? std::optional<std::string>{*engine} : std::nullopt,
        smoke_flag->count() > 0 && o->smoke_steps > 0);  // 0: no smoke run, as without it
    if (!kind) {
      exit_code = 2;
      std::cerr << "kvconnect scheduler: " << kind.error().message() << std::endl;
      return;
    }
    exit_code = apply_role_config(*cmd, *config, o->token, "scheduler",
                                  [&](const config_input& in) -> status {
                                    *o = scheduler_options_of(in.config, in.plan, *kind);
                                    return status::success();
                                  });
    if (exit_code != 0) return;
    o->engine = *kind;
    exit_code = run_scheduler_process(*o);
  });
}

}  // namespace kvc::launch
