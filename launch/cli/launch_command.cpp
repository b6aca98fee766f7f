// `kvconnect launch [FILE] [--set key.path=value]... [--node N] [--fault SPEC]...
// [--fault-seed N]`: starts the node's processes from one config file (docs/config.md) and
// supervises them (launch/supervisor/node_launcher.hpp); --compare's reference run is the
// simulated engine's, passed to the supervisor from here.
#include <unistd.h>

#include <climits>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/cli/commands.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/engines/sim/in_process_run.hpp"
#include "launch/engines/sim/run_comparison.hpp"
#include "launch/engines/sim/run_report.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/supervisor/launcher_output.hpp"
#include "launch/supervisor/node_launcher.hpp"

namespace kvc::launch {

namespace {

using nlohmann::json;

/// `--compare`: the same workload without offloading, in this process (the reference run of
/// `soak --compare`), compared over the requests finished in both runs (`finished`: the
/// scheduler's "finished" line); its table and the comparison's on stderr, the "compare" line
/// to print. None (with the error said) when the scheduler's finished requests are missing or
/// unreadable, or the reference run could not start.
std::optional<json> compare_without_offload(const launch_config& c, const json& summary,
                                            const std::optional<json>& finished) {
  if (!finished) {
    say("--compare: the scheduler did not list its finished requests");
    return std::nullopt;
  }
  auto on = sim::finished_from_json(*finished);
  if (!on) {
    say("--compare: " + on.error().to_string());
    return std::nullopt;
  }
  sim::in_process_options reference;
  reference.config = c;
  reference.instance = "launch-compare-" + std::to_string(::getpid());
  auto off = sim::run_without_offload(reference);
  if (!off) {
    say("--compare: the run without offloading: " + off.error().to_string());
    return std::nullopt;
  }
  const json off_line = sim::summary_json(*off);
  const sim::run_comparison compared = sim::compare_finished(*on, off->finished);
  std::cerr << (sim::summary_table(*off) + sim::compare_table(summary, off_line, compared))
            << std::flush;
  return sim::compare_json(summary, off_line, compared);
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<launch_options>();
  auto* cmd = app.add_subcommand(
      "launch", "Start and supervise a node's scheduler and worker processes from a config file");
  cmd->add_option("file", o->file, "YAML config file (docs/config.md); none: the default");
  cmd->add_option("--set", o->overrides, "key.path=value: overrides the file (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--node", o->node, "Index of this node in topology.nodes")->capture_default_str();
  cmd->add_option("--engine", o->engine,
                  "sim: the simulated engine's workload; smoke: store/load round trips")
      ->capture_default_str()
      ->check(CLI::IsMember(engine_names(true)));
  cmd->add_flag("--compare", o->compare,
                "Then run the workload again without offloading (in this process); compare");
  auto faults = std::make_shared<std::vector<std::string>>();
  auto fault_seed = std::make_shared<std::optional<uint64_t>>();
  cmd->add_option("--fault", *faults,
                  "Inject a fault: kind:key=value,... (docs/faults.md; repeatable; replaces "
                  "runtime.faults)")
      ->allow_extra_args(false);
  cmd->add_option("--fault-seed", *fault_seed, "The injected faults' seed (runtime.fault_seed)");
  auto trace_dir = std::make_shared<std::string>();
  auto trace_level = std::make_shared<std::string>("messages");
  cmd->add_option("--trace", *trace_dir,
                  "Record message traces of every process into this directory "
                  "(observe.trace_dir; observe.trace from --trace-level)");
  cmd->add_option("--trace-level", *trace_level, "With --trace: messages, or jobs")
      ->check(CLI::IsMember({"messages", "jobs"}))
      ->capture_default_str();
  cmd->callback([o, faults, fault_seed, trace_dir, trace_level, &exit_code] {
    // Through --set, after the user's own: the loader checks them like the file's.
    if (!faults->empty()) o->overrides.push_back(fault_override(*faults));
    if (*fault_seed) o->overrides.push_back("runtime.fault_seed=" + std::to_string(**fault_seed));
    if (!trace_dir->empty()) {
      o->overrides.push_back("observe.trace=" + *trace_level);
      o->overrides.push_back("observe.trace_dir=" + *trace_dir);
    }
    char self[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    o->binary = n > 0 ? std::string(self, static_cast<size_t>(n)) : "kvconnect";
    o->compare_run = compare_without_offload;
    exit_code = run_launch(*o);
  });
}

}  // namespace kvc::launch
