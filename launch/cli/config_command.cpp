// `kvconnect config show [FILE] [--set k=v]...`: the effective launch config, every default
// filled in (no FILE: the embedded default). `kvconnect config check FILE [--set k=v]...`:
// validates and prints what it would launch. Both exit 2 on a config error, with one line per
// error on stderr naming the file, the line and the key path (docs/config.md).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "launch/cli/commands.hpp"
#include "launch/config/config_file.hpp"
#include "launch/config/launch_plan.hpp"

namespace kvc::launch {

namespace {

struct config_options {
  std::string file;
  std::vector<std::string> overrides;
};

void add_source_flags(CLI::App& cmd, config_options& o, bool file_required) {
  auto* file = cmd.add_option("file", o.file, "YAML config file (docs/config.md)");
  if (file_required) file->required();
  cmd.add_option("--set", o.overrides, "key.path=value: overrides the file (repeatable)")
      ->allow_extra_args(false);
}

/// "2 ranks on 1 node; pool 256 slots of 131072 bytes per rank".
std::string describe(const launch_config& c) {
  const auto g = derive_geometry(c);
  std::string out =
      std::to_string(g.world_size) + " ranks (tp " + std::to_string(c.topology.tensor_parallel) +
      " x pp " + std::to_string(c.topology.pipeline_parallel) + ") on " +
      std::to_string(c.topology.nodes.size()) +
      (c.topology.nodes.size() == 1 ? " node" : " nodes") + ", backend " + c.topology.backend;
  if (!c.offload.enabled) return out + ", offload off";
  auto pool = shm::size_pool(c.offload.cpu_bytes_to_use, g.world_size, g.slot_bytes);
  if (pool) {
    out += ", pool " + std::to_string(pool->num_slots) + " slots of " +
           std::to_string(g.slot_bytes) + " bytes per rank (" + std::to_string(g.factor) +
           (g.factor == 1 ? " GPU block" : " GPU blocks") + " per offloaded block)";
  }
  return out;
}

}  // namespace

void add_config_command(CLI::App& app, int& exit_code) {
  auto* group = app.add_subcommand("config", "Show or check a launch config (docs/config.md)");
  group->require_subcommand(1);

  auto show = std::make_shared<config_options>();
  auto* show_cmd = group->add_subcommand(
      "show", "Print the effective config, every default filled in (no FILE: the default)");
  add_source_flags(*show_cmd, *show, false);
  show_cmd->callback([show, &exit_code] {
    auto loaded = load_config_file(show->file, show->overrides);
    if (!loaded.ok()) {
      print_config_errors(loaded, "config show");
      exit_code = 2;
      return;
    }
    std::cout << to_yaml(loaded.config);
    exit_code = 0;
  });

  auto check = std::make_shared<config_options>();
  auto* check_cmd =
      group->add_subcommand("check", "Validate a config: exit 0 when valid, 2 otherwise");
  add_source_flags(*check_cmd, *check, true);
  check_cmd->callback([check, &exit_code] {
    auto loaded = load_config_file(check->file, check->overrides);
    if (!loaded.ok()) {
      print_config_errors(loaded, "config check");
      exit_code = 2;
      return;
    }
    std::cout << check->file << ": ok: " << describe(loaded.config) << "\n";
    exit_code = 0;
  });
}

}  // namespace kvc::launch
