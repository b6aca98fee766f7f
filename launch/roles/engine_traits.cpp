#include "launch/roles/engine_traits.hpp"

#include <array>
#include <string>

#include "launch/roles/role_options.hpp"

namespace kvc::launch {

namespace {

constexpr std::array<engine_traits, 3> table{{
    {.kind = engine_kind::serve,
     .name = "serve",
     .waits_for_steps = false,
     .executor_channel = false,
     .launchable = false,
     .run_figures = false,
     .run_name = "serving",
     .needs_offload = "serves the connector of an external engine"},
    {.kind = engine_kind::smoke,
     .name = "smoke",
     .waits_for_steps = true,
     .executor_channel = false,
     .launchable = true,
     .run_figures = false,
     .run_name = "smoke run",
     .needs_offload = "runs store/load round trips through the pool"},
    {.kind = engine_kind::sim,
     .name = "sim",
     .waits_for_steps = true,
     .executor_channel = true,
     .launchable = true,
     .run_figures = true,
     .run_name = "simulated run",
     .needs_offload = ""},
}};

}  // namespace

const engine_traits& traits_of(engine_kind kind) {
  return table[static_cast<size_t>(kind)];
}

std::string_view to_string(engine_kind kind) {
  return traits_of(kind).name;
}

result<engine_kind> parse_engine_kind(std::string_view name) {
  for (const engine_traits& t : table) {
    if (t.name == name) return t.kind;
  }
  return make_error(errc::invalid_argument,
                    "--engine " + std::string{name} + ": serve, smoke or sim");
}

std::string offload_problem(const engine_traits& engine, bool offload, bool faults,
                            bool restarts) {
  if (offload) return {};
  if (!engine.needs_offload.empty()) {
    std::string without;
    for (const engine_traits& t : table) {
      if (!t.needs_offload.empty()) continue;
      without += (without.empty() ? "" : ", ") + std::string{t.name};
    }
    return "offload.enabled is false: engine " + std::string{engine.name} + " " +
           std::string{engine.needs_offload} + " (without offloading: " + without + ")";
  }
  if (faults) {
    return "runtime.faults: offload.enabled is false: injected faults act on the connector's "
           "step channel, its transfers and its ranks, which a run without offloading does not "
           "have";
  }
  if (restarts) {
    return "topology.restart.policy: on-failure: offload.enabled is false: a restarted rank "
           "cannot rejoin the run (no connector sees ranks go and come back)";
  }
  return {};
}

std::vector<std::string> engine_names(bool launchable_only) {
  std::vector<std::string> out;
  for (const engine_traits& t : table) {
    if (t.launchable || !launchable_only) out.emplace_back(t.name);
  }
  return out;
}

result<engine_kind> scheduler_engine_of_flags(const std::optional<std::string>& engine,
                                              bool smoke_steps_given) {
  if (!engine) return smoke_steps_given ? engine_kind::smoke : engine_kind::serve;
  auto kind = parse_engine_kind(*engine);
  if (!kind) return kind.error();
  if (smoke_steps_given && *kind != engine_kind::smoke) {
    return make_error(errc::invalid_argument,
                      "--smoke-steps is the smoke run's step count: --engine " + *engine +
                          " takes none");
  }
  return *kind;
}

engine_kind engine_of(const worker_process_options& o) {
  return o.executor.empty() ? engine_kind::serve : engine_kind::sim;
}

}  // namespace kvc::launch
