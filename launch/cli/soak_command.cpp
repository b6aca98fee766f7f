// `kvconnect soak [FILE] [--set key.path=value]... [--steps N] [--seed S] [--compare]
// [--fault SPEC]... [--fault-seed N]`: the simulated engine with every rank in this process
// (launch/engines/sim/in_process_run.hpp) on the deterministic manual copy engine and the memory
// step transport, with the channel and copy faults of runtime.faults / --fault injected.
// Prints the human summary on stderr and JSON lines on stdout ({"event":"summary",...}; with
// faults then {"event":"fault_report",...}; with --compare a second run without offloading and
// {"event":"compare",...}; with a file tier also a run with the pool alone and
// {"event":"compare_tier",...}). Exit 0 when the run passed its checks (zero mismatches, nothing
// hung, pending or leaked), 1 otherwise, 3 when a fault report's invariant failed, 2 for a config
// error (a process fault included: it needs processes, `kvconnect launch`).
#include <unistd.h>

#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "launch/cli/commands.hpp"
#include "launch/config/config_file.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/fault_report.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/config/tier_dirs.hpp"
#include "launch/engines/sim/in_process_run.hpp"
#include "launch/engines/sim/run_comparison.hpp"

namespace kvc::launch {

namespace {

struct soak_options {
  std::string file;
  std::vector<std::string> overrides;
  std::optional<uint32_t> steps;
  std::optional<uint64_t> seed;
  bool compare = false;
  std::vector<std::string> faults;
  std::optional<uint64_t> fault_seed;
};

/// check_tier_space for every rank of the world: a soak runs them all in this process.
status check_soak_tier_space(const launch_config& c) {
  if (!c.offload.enabled || c.offload.secondary_tiers.empty()) return status::success();
  auto plan = make_plan(c, "soak", "soak");
  if (!plan) return plan.error();
  std::vector<rank_id> every_rank(plan->rank_node.size());
  std::iota(every_rank.begin(), every_rank.end(), rank_id{0});
  return check_tier_space(*plan, every_rank);
}

int run_soak(const soak_options& o) {
  // Logs go to stderr (level: $SPDLOG_LEVEL); stdout carries only the JSON lines.
  auto logger =
      std::make_shared<spdlog::logger>("kvc", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [soak] [%l] %v");
  spdlog::set_default_logger(std::move(logger));
  spdlog::cfg::load_env_levels();
  std::vector<std::string> overrides = o.overrides;
  if (o.steps) overrides.push_back("workload.steps=" + std::to_string(*o.steps));
  if (o.seed) overrides.push_back("workload.seed=" + std::to_string(*o.seed));
  if (!o.faults.empty()) overrides.push_back(fault_override(o.faults));
  if (o.fault_seed) overrides.push_back("runtime.fault_seed=" + std::to_string(*o.fault_seed));
  auto loaded = load_config_file(o.file, overrides);
  if (!loaded.ok()) {
    print_config_errors(loaded, "soak");
    return 2;
  }
  for (auto check : {check_tier_dirs, check_tier_config, check_soak_tier_space}) {
    if (auto st = check(loaded.config); !st) {
      std::cerr << "kvconnect soak: " << st.message() << "\n";
      return 2;
    }
  }
  auto faults = parse_fault_options(loaded.config.runtime.faults, loaded.config.runtime.fault_seed);
  if (!faults) {
    std::cerr << "kvconnect soak: " << faults.error().message() << "\n";
    return 2;
  }
  if (!faults_at(*faults, fault_site::process).empty()) {
    std::cerr << "kvconnect soak: process faults (kill_rank, hang_rank, kill_scheduler) need "
                 "processes: use kvconnect launch\n";
    return 2;
  }
  for (const fault_spec& f : faults->specs) {
    if (f.kind == fault_kind::lose_device) {
      std::cerr << "kvconnect soak: lose_device ends the rank's process for a restart: use "
                   "kvconnect launch with restart.policy on-failure\n";
      return 2;
    }
  }
  sim::in_process_options run;
  run.config = loaded.config;
  run.faults = *faults;
  run.offload = loaded.config.offload.enabled;
  run.instance = "soak-" + std::to_string(::getpid());
  auto on = sim::run_in_process(run);
  if (!on) {
    std::cerr << "kvconnect soak: " << on.error().to_string() << "\n";
    return 1;
  }
  std::cerr << sim::summary_table(*on);
  std::cout << sim::summary_json(*on).dump() << std::endl;
  const fault_outcome outcome = sim::fault_outcome_of(*on, faults->seed);
  if (!faults->empty()) std::cout << fault_report_line(outcome) << std::endl;
  if (o.compare && run.offload) {
    auto off = sim::run_without_offload(run);
    if (!off) {
      std::cerr << "kvconnect soak: " << off.error().to_string() << "\n";
      return 1;
    }
    std::cerr << sim::summary_table(*off) << sim::compare_table(*on, *off);
    std::cout << sim::compare_json(*on, *off).dump() << std::endl;
    if (on->file_tier) {  // and what the file tier adds beyond the pool alone
      auto pool_only = sim::run_without_tier(run);
      if (!pool_only) {
        std::cerr << "kvconnect soak: " << pool_only.error().to_string() << "\n";
        return 1;
      }
      std::cerr << sim::compare_tier_table(*on, *pool_only);
      std::cout << sim::compare_tier_json(*on, *pool_only).dump() << std::endl;
    }
  }
  const int code = on->ok() ? 0 : 1;
  return faults->empty() ? code : fault_report_exit_code(outcome, code);
}

}  // namespace

void add_soak_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<soak_options>();
  auto* cmd = app.add_subcommand(
      "soak", "Run the simulated engine with every rank in this process (deterministic)");
  cmd->add_option("file", o->file, "YAML config file (docs/config.md); none: the default");
  cmd->add_option("--set", o->overrides, "key.path=value: overrides the file (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--steps", o->steps, "Steps with arrivals (workload.steps)");
  cmd->add_option("--seed", o->seed, "The workload's seed (workload.seed)");
  cmd->add_flag(
      "--compare", o->compare,
      "Run the workload again without offloading (and, with a file tier, with the pool alone); "
      "compare");
  cmd->add_option("--fault", o->faults,
                  "Inject a fault: kind:key=value,... (docs/faults.md; repeatable; replaces "
                  "runtime.faults)")
      ->allow_extra_args(false);
  cmd->add_option("--fault-seed", o->fault_seed, "The injected faults' seed (runtime.fault_seed)");
  cmd->callback([o, &exit_code] { exit_code = run_soak(*o); });
}

}  // namespace kvc::launch
