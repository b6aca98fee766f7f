// `kvconnect launch [FILE] [--set key.path=value]... [--node N]`: starts the node's processes
// from one config file (docs/config.md) and supervises them (launch/node_launcher.hpp).
#include <unistd.h>

#include <climits>
#include <memory>
#include <string>

#include "launch/commands.hpp"
#include "launch/node_launcher.hpp"

namespace kvc::launch {

void add_launch_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<launch_options>();
  auto* cmd = app.add_subcommand(
      "launch", "Start and supervise a node's scheduler and worker processes from a config file");
  cmd->add_option("file", o->file, "YAML config file (docs/config.md); none: the default");
  cmd->add_option("--set", o->overrides, "key.path=value: overrides the file (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--node", o->node, "Index of this node in topology.nodes")->capture_default_str();
  auto trace_dir = std::make_shared<std::string>();
  auto trace_level = std::make_shared<std::string>("messages");
  cmd->add_option("--trace", *trace_dir,
                  "Record message traces of every process into this directory "
                  "(observe.trace_dir; observe.trace from --trace-level)");
  cmd->add_option("--trace-level", *trace_level, "With --trace: messages, or jobs")
      ->check(CLI::IsMember({"messages", "jobs"}))
      ->capture_default_str();
  cmd->callback([o, trace_dir, trace_level, &exit_code] {
    if (!trace_dir->empty()) {
      o->overrides.push_back("observe.trace=" + *trace_level);
      o->overrides.push_back("observe.trace_dir=" + *trace_dir);
    }
    char self[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    o->binary = n > 0 ? std::string(self, static_cast<size_t>(n)) : "kvconnect";
    exit_code = run_launch(*o);
  });
}

}  // namespace kvc::launch
