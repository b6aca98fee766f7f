#include "launch/roles/engine_traits.hpp"

#include <array>
#include <string>

namespace kvc::launch {

namespace {

constexpr std::array<engine_traits, 3> table{{
    {.kind = engine_kind::serve,
     .name = "serve",
     .waits_for_steps = false,
     .executor_channel = false,
     .launchable = false,
     .run_figures = false,
     .run_name = "serving"},
    {.kind = engine_kind::smoke,
     .name = "smoke",
     .waits_for_steps = true,
     .executor_channel = false,
     .launchable = true,
     .run_figures = false,
     .run_name = "smoke run"},
    {.kind = engine_kind::sim,
     .name = "sim",
     .waits_for_steps = true,
     .executor_channel = true,
     .launchable = true,
     .run_figures = true,
     .run_name = "simulated run"},
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

engine_kind engine_of(const scheduler_process_options& o) {
  if (o.sim_engine) return engine_kind::sim;
  return o.smoke_steps > 0 ? engine_kind::smoke : engine_kind::serve;
}

engine_kind engine_of(const worker_process_options& o) {
  return o.executor.empty() ? engine_kind::serve : engine_kind::sim;
}

}  // namespace kvc::launch
