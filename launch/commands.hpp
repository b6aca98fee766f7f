#pragma once
/// The subcommands of the `kvconnect` binary. Each add_* registers one CLI11 subcommand whose
/// callback stores the process exit code in `exit_code`.
#include <CLI/CLI.hpp>

namespace kvc::launch {

void add_version_command(CLI::App& app, int& exit_code);

}  // namespace kvc::launch
