#include "launch/supervisor/node_launcher.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include <spdlog/common.h>
#include <nlohmann/json.hpp>

#include "launch/config/config_file.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/fault_report.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/config/tier_dirs.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/roles/child_events.hpp"
#include "launch/roles/engine_traits.hpp"
#include "launch/roles/node_processes.hpp"
#include "launch/supervisor/child_environment.hpp"
#include "launch/supervisor/launch_summary.hpp"
#include "launch/supervisor/launcher_output.hpp"
#include "launch/supervisor/node_run.hpp"
#include "launch/supervisor/observe_dirs.hpp"
#include "launch/supervisor/process_faults.hpp"
#include "shm/segment.hpp"
#include "shm/stale_segments.hpp"

namespace kvc::launch {

namespace {

using clock = std::chrono::steady_clock;
using nlohmann::json;

/// Removes the segments earlier runs of this user left behind (their creator is gone); prints
/// {"event":"cleanup","removed":[...]} when there were any.
void sweep_stale_segments(const std::string& log_level) {
  auto sweep = shm::remove_stale_segments(::getuid());
  if (!sweep) {
    say("cannot look for stale segments: " + sweep.error().to_string());
    return;
  }
  for (const auto& p : sweep->problems) say(p);
  if (sweep->removed.empty()) return;
  json names = json::array();
  for (const auto& r : sweep->removed) {
    names.push_back(r.name);
    if (spdlog::level::from_str(log_level) <= spdlog::level::warn) {
      say("removed " + r.name + ", left by an earlier run (creator pid " +
          std::to_string(r.creator) + " is gone)");
    }
  }
  emit({{"event", "cleanup"}, {"removed", names}});
}

}  // namespace

int run_launch(const launch_options& o) {
  const auto t0 = clock::now();
  auto loaded = load_config_file(o.file, o.overrides);
  if (!loaded.ok()) {
    print_config_errors(loaded, "launch");
    say("nothing started");
    return 2;
  }
  const launch_config& c = loaded.config;
  const size_t nodes = c.topology.nodes.size();
  auto refuse = [](const std::string& why) {
    say(why + "; nothing started");
    return 2;
  };
  if (o.node >= nodes) {
    return refuse("--node " + std::to_string(o.node) + ": topology.nodes has " +
                  std::to_string(nodes) + (nodes == 1 ? " node" : " nodes"));
  }
  const auto kind = parse_engine_kind(o.engine);
  if (!kind || !traits_of(*kind).launchable) {
    return refuse("--engine " + o.engine + ": sim or smoke");
  }
  const engine_traits& engine = traits_of(*kind);
  const bool offload = c.offload.enabled;
  if (auto p = offload_problem(engine, offload, !c.runtime.faults.empty(), restarts_allowed(c));
      !p.empty()) {
    return refuse(p);
  }
  // The engine of a launch waits for each step's output: a lost report must fail its jobs at
  // their deadline before that wait ends (check_config refuses a wait shorter than the
  // deadline; here also no deadline by time, which only the in-process soak can do without).
  if (auto p = step_wait_problem(c.runtime.step_timeout_ms, c.runtime.job_timeout_ms,
                                 "runtime.step_timeout_ms", "runtime.job_timeout_ms", true);
      !p.empty()) {
    return refuse(p);
  }
  if (o.compare && (!engine.run_figures || o.node != 0)) {
    return refuse("--compare: the simulated engine's run on node 0 is what it compares");
  }
  if (o.compare && !offload) {
    return refuse("--compare: offload.enabled is false: the launch is already the run without "
                  "offloading that --compare adds");
  }
  std::string token = c.runtime.token;
  if (token.empty()) {
    if (const char* env = std::getenv("KVCONNECT_TOKEN"); env != nullptr) token = env;
  }
  if (nodes > 1) {
    // The other nodes reach the scheduler at the first node's host, a fixed port, the token.
    if (token.empty()) {
      return refuse("a launch over " + std::to_string(nodes) +
                    " nodes needs the shared token: set runtime.token or $KVCONNECT_TOKEN on "
                    "every node");
    }
    if (c.runtime.port == 0) {
      return refuse("a launch over " + std::to_string(nodes) +
                    " nodes needs a fixed runtime.port (0 picks a free one, which the other "
                    "nodes cannot know)");
    }
    const std::string& h = c.topology.nodes[0].host;
    if (h == "0.0.0.0" || h == "::" || h == "*") {
      return refuse("topology.nodes[0].host: \"" + h +
                    "\" is no address the other nodes can reach the scheduler at");
    }
  }
  if (token.empty()) token = generate_token();  // one node: nobody else needs to know it
  const std::string instance =
      c.runtime.instance.empty() ? "launch-" + std::to_string(::getpid()) : c.runtime.instance;
  // The tier's directories first: then make_plan's tier check (check_tier_config). Without
  // offloading there is no pool, hence no tier behind it; the plan gives the geometry.
  if (offload) {
    if (auto st = check_tier_dirs(c); !st) return refuse(st.message());
  }
  auto plan = make_geometry_plan(c, instance, token);
  if (!plan) return refuse(plan.error().to_string());
  const auto ranks = plan->ranks_on(o.node);
  if (offload) {
    if (auto st = check_tier_space(*plan, ranks); !st) return refuse(st.message());
  }
  // Process faults: node 0's launcher carries them out, on the ranks of node 0.
  auto faults = parse_fault_options(c.runtime.faults, c.runtime.fault_seed);
  if (!faults) return refuse("runtime.faults: " + faults.error().message());
  process_fault_schedule process_faults;
  if (o.node == 0) {
    auto s = process_fault_schedule::create(*faults, ranks);
    if (!s) return refuse("runtime.faults: " + s.error().message());
    process_faults = std::move(s).value();
  }
  if (auto st = make_observe_dirs(c, o.node); !st) return refuse(st.message());
  const std::string segment = shm::segment_name(::getuid(), instance, o.node);

  sweep_stale_segments(c.runtime.log_level);
  signal_watcher signals;  // before any child: they must not inherit a half-set-up state
  // Another node's segment: its launcher creates it (node 0's scheduler creates node 0's) and
  // removes it at the end; its workers attach to it.
  std::optional<shm::segment> own_segment;
  if (o.node != 0 && offload) {
    auto seg = shm::segment::create(segment, plan->pool);
    if (!seg) {
      say("cannot create " + segment + ": " + seg.error().to_string());
      return 1;
    }
    own_segment.emplace(std::move(seg).value());
  }
  node_run run(c, *plan, o.node, ranks, o.binary, child_environment(token, c.runtime.log_level),
               engine.kind, std::move(process_faults), c.runtime.fault_seed);
  int code = run.run(signals);
  own_segment.reset();  // removes it

  // A scheduler that was killed cannot remove its segment: the launch does, when the segment's
  // header names that scheduler. A segment of the same name that another live process created
  // (a second launch of the instance, refused) is not this launch's to remove.
  bool segment_left = false;
  if (o.node == 0 && run.scheduler_pid() > 0) {
    auto removed = shm::remove_segment_left_by(segment, run.scheduler_pid());
    if (!removed) {
      say(removed.error().to_string());
    } else if (*removed) {
      segment_left = true;
      if (spdlog::level::from_str(c.runtime.log_level) <= spdlog::level::warn) {
        say("removed " + segment + ", left behind by the scheduler (pid " +
            std::to_string(run.scheduler_pid()) + ")");
      }
    }
  }
  const auto wall = std::chrono::duration<double>(clock::now() - t0).count();
  json summary{{"event", "summary"},
               {"ok", code == 0},
               {"exit_code", code},
               {"reason", run.outcome().reason()},
               {"node", o.node},
               {"ranks", ranks.size()},
               {"world_size", plan->kv.world_size},
               {"restarts", run.outcome().restarts()},
               {"segment", offload ? json(segment) : json()},  // none without offloading
               {"segment_left", segment_left},
               {"wall_seconds", std::round(wall * 1000) / 1000}};
  // From the launcher's start to the scheduler's first step (every rank registered).
  summary["first_step_seconds"] =
      run.ready_at()
          ? json(std::round(std::chrono::duration<double>(*run.ready_at() - t0).count() * 1000) /
                 1000)
          : json();
  // Node 0 has the scheduler's figures; another node has its workers' checks.
  child_reports& said = run.reports();
  const bool sim_figures = engine.run_figures && (said.sim() || o.node != 0);
  const bool checked =
      !sim_figures ||
      add_sim_figures(summary, said.sim(), said.runners(), ranks.size(), said.rank_connector_ns());
  // With faults: one fault report of the whole node, whose invariants are the summary's counts
  // (one source for both lines), and exit 3 when one failed.
  if (auto report = run.fault_report()) {
    if (sim_figures) take_invariants(*report, summary);
    else (*report)["invariants_ok"] = invariants_ok(*report);
    if (!report->value("invariants_ok", true)) code = 3;
    emit(*report);
  }
  summary["ok"] = code == 0;
  summary["exit_code"] = code;
  std::optional<json> compared;
  if (engine.run_figures) {
    if (sim_figures) {
      if (code == 0 && !checked) {
        code = 1;
        summary["reason"] =
            std::to_string(said.runners().size()) + " of " + std::to_string(ranks.size()) +
            " workers reported their load checks; mismatches: " + summary["load_mismatches"].dump();
      }
    } else {
      summary["steps"] = json();
    }
    summary["ok"] = code == 0;
    summary["exit_code"] = code;
    if (said.sim() || o.node != 0) print_sim_table(summary);
    if (o.compare && said.sim()) {
      compared = o.compare_run(c, summary, said.finished());
      if (!compared && code == 0) code = 1;
      summary["ok"] = code == 0;
      summary["exit_code"] = code;
    }
  } else {
    // The smoke line's fields (child_events.hpp), null when the scheduler printed none.
    const json fields = to_json(child_event{smoke_event{}});
    for (const auto& [k, v] : fields.items()) {
      if (k != "event") summary[k] = said.smoke() ? said.smoke()->value(k, json()) : json();
    }
  }
  emit(summary);
  if (compared) emit(*compared);
  return code;
}

}  // namespace kvc::launch
