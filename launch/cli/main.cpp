// kvconnect: one binary, one subcommand per role or tool.
#include <csignal>
#include <exception>
#include <iostream>

#include "launch/bench/bench_commands.hpp"
#include "launch/cli/commands.hpp"

int main(int argc, char** argv) {
  // A reader of our stdout that went away (`kvconnect scheduler | head -1`) is a write error,
  // handled where the line is written, not a death by SIGPIPE that leaves the segment behind.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"kvconnect: a KV-cache offload runtime (scheduler, workers, coordinator)"};
  app.require_subcommand(1);
  int exit_code = 0;
  kvc::launch::add_version_command(app, exit_code);
  kvc::launch::add_replay_command(app, exit_code);
  kvc::launch::add_replay_run_command(app, exit_code);
  kvc::launch::add_bench_manager_command(app, exit_code);
  kvc::launch::add_bench_planner_command(app, exit_code);
  kvc::launch::add_bench_copy_command(app, exit_code);
  kvc::launch::add_bench_step_command(app, exit_code);
  kvc::launch::add_bench_tier_command(app, exit_code);
  kvc::launch::add_scheduler_command(app, exit_code);
  kvc::launch::add_worker_command(app, exit_code);
  kvc::launch::add_config_command(app, exit_code);
  kvc::launch::add_launch_command(app, exit_code);
  kvc::launch::add_events_command(app, exit_code);
  kvc::launch::add_cleanup_command(app, exit_code);
  kvc::launch::add_soak_command(app, exit_code);
  kvc::launch::add_trace_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end well; every other parse error is a usage error: exit 2, with
    // CLI11's one-line message (not CLI11's own codes 101-115).
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "kvconnect: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
