#include <iostream>

#include "launch/cli/commands.hpp"

namespace kvc::launch {

void add_version_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("version", "Print the kvconnect version");
  cmd->callback([&exit_code] {
    std::cout << "kvconnect " << KVC_VERSION << "\n";
    exit_code = 0;
  });
}

}  // namespace kvc::launch
