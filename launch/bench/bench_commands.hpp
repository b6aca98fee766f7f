#pragma once
/// The `kvconnect bench` subcommands (launch/bench/). Each add_* registers one CLI11 subcommand
/// under the shared `bench` group whose callback stores the process exit code in `exit_code`.
#include <CLI/CLI.hpp>

namespace kvc::launch {

/// The `bench` parent command shared by every benchmark subcommand: found or created.
CLI::App& bench_group(CLI::App& app);

/// `bench gen-trace` and `bench manager` (adds to the shared `bench` group).
void add_bench_manager_command(CLI::App& app, int& exit_code);
/// `bench planner` (adds to the shared `bench` group, creating it if absent).
void add_bench_planner_command(CLI::App& app, int& exit_code);

/// `bench copy`: copy engine through a shm pool vs memcpy (adds to the shared `bench` group).
void add_bench_copy_command(CLI::App& app, int& exit_code);

/// `bench step`: one engine step's control-plane round trip through the embedding API to TP
/// worker processes vs a bare ZeroMQ round trip (adds to the shared `bench` group).
void add_bench_step_command(CLI::App& app, int& exit_code);

/// `bench tier`: the file tier's block I/O (disk::file_io) vs fio on the same file system
/// (adds to the shared `bench` group).
void add_bench_tier_command(CLI::App& app, int& exit_code);

}  // namespace kvc::launch
