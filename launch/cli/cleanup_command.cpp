// `kvconnect cleanup`: removes this user's shm segments whose creator is gone (a crashed
// launch's leftovers; shm/stale_segments.hpp). A segment of a live run is never touched. One
// line per segment removed on stdout; problems on stderr (exit 1).
#include <unistd.h>

#include <iostream>

#include "launch/cli/commands.hpp"
#include "shm/stale_segments.hpp"

namespace kvc::launch {

void add_cleanup_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "cleanup", "Remove this user's shm segments left by crashed runs (their creator is gone)");
  cmd->callback([&exit_code] {
    auto sweep = shm::remove_stale_segments(::getuid());
    if (!sweep) {
      std::cerr << "kvconnect cleanup: " << sweep.error().to_string() << std::endl;
      exit_code = 1;
      return;
    }
    for (const auto& r : sweep->removed) {
      std::cout << "removed " << r.name << " (creator pid " << r.creator << " is gone)\n";
    }
    if (sweep->removed.empty()) std::cout << "nothing to remove\n";
    std::cout << std::flush;
    for (const auto& p : sweep->problems) std::cerr << "kvconnect cleanup: " << p << "\n";
    exit_code = sweep->problems.empty() ? 0 : 1;
  });
}

}  // namespace kvc::launch
