#include "launch/bench/bench_commands.hpp"

namespace kvc::launch {

CLI::App& bench_group(CLI::App& app) {
  auto found = app.get_subcommands([](CLI::App* a) { return a->get_name() == "bench"; });
  if (!found.empty()) return *found.front();
  auto* bench = app.add_subcommand("bench", "Benchmarks (each prints JSON lines)");
  bench->require_subcommand(1);
  return *bench;
}

}  // namespace kvc::launch
