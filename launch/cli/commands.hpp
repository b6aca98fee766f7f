#pragma once
/// The subcommands of the `kvconnect` binary. Each add_* registers one CLI11 subcommand whose
/// callback stores the process exit code in `exit_code`. The benchmarks' subcommands are
/// declared in launch/bench/bench_commands.hpp.
#include <CLI/CLI.hpp>

namespace kvc::launch {

void add_version_command(CLI::App& app, int& exit_code);
/// `replay [FILE|-]`: offload-manager ops as JSON lines, one answer line per op.
void add_replay_command(CLI::App& app, int& exit_code);
/// `replay-run DIR|FILE [--quiet]`: re-drives the cores from a run record (observe.record).
void add_replay_run_command(CLI::App& app, int& exit_code);
/// `scheduler`: the scheduler + coordinator of one node (creates the shm pool, publishes on
/// 127.0.0.1, prints {"event":"listening","port":N}); --smoke-steps drives a self-check.
void add_scheduler_command(CLI::App& app, int& exit_code);
/// `worker --rank R --port P`: one rank's worker process (registers, executes steps).
void add_worker_command(CLI::App& app, int& exit_code);
/// `config show [FILE]` / `config check FILE`, with `--set key.path=value` (docs/config.md).
void add_config_command(CLI::App& app, int& exit_code);
/// `events tail ENDPOINT`: prints a KV-event stream (vLLM's wire format) as JSON lines.
void add_events_command(CLI::App& app, int& exit_code);
/// `launch [FILE] [--node N]`: starts and supervises a node's processes (node_launcher.hpp).
void add_launch_command(CLI::App& app, int& exit_code);
/// `cleanup`: removes this user's segments left by crashed runs (shm/stale_segments.hpp).
void add_cleanup_command(CLI::App& app, int& exit_code);
/// `soak [FILE] [--steps N] [--seed S] [--compare]`: the simulated engine in one process.
void add_soak_command(CLI::App& app, int& exit_code);
/// `trace export DIR -o FILE` / `trace summary DIR [--request ID]` (docs/observability.md).
void add_trace_command(CLI::App& app, int& exit_code);

}  // namespace kvc::launch
