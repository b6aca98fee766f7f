#include "actors/coordinator/coordinator_actor.hpp"

#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/typed_event_based_actor.hpp>

namespace kvc::coordinator {

namespace {

using self_pointer = coordinator_impl::stateful_pointer<coordinator_state>;

uint64_t now_ns(self_pointer self) {
  auto since_epoch = self->clock().now().time_since_epoch();
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count());
}

/// After every message: hand out released outputs, keep the deadline timer running if needed.
void publish(self_pointer self) {
  coordinator_state& st = self->state;
  while (auto out = st.core->poll_output()) self->send(st.sink, std::move(*out));
  if (!st.tick_armed && st.core->needs_tick()) {
    st.tick_armed = true;
    self->delayed_send(self, st.tick_interval, runtime::tick_atom::value);
  }
}

}  // namespace

coordinator_impl::behavior_type coordinator(self_pointer self, runtime::output_sink_actor sink,
                                            step_coordinator core, coordinator_options opts) {
  coordinator_state& st = self->state;
  st.core.emplace(std::move(core));
  st.sink = std::move(sink);
  st.tick_interval = opts.tick_interval;
  return {
      [self](runtime::report_atom, rank_id rank, uint32_t incarnation, step_id step,
             const std::vector<completion_event>& events) {
        self->state.core->report(rank, incarnation, step, events);
        publish(self);
      },
      [self](runtime::expect_atom, step_id step, const std::vector<job_id>& loads,
             const std::vector<job_id>& stores) {
        self->state.core->expect(step, loads, stores, now_ns(self));
        publish(self);
      },
      [self](runtime::rank_up_atom, rank_id rank, uint32_t incarnation) {
        self->state.core->rank_up(rank, incarnation);
        publish(self);
      },
      [self](runtime::rank_down_atom, rank_id rank) {
        self->state.core->rank_down(rank);
        publish(self);
      },
      [self](runtime::tick_atom) {
        self->state.tick_armed = false;
        self->state.core->tick(now_ns(self));
        publish(self);
      },
  };
}

result<runtime::coordinator_actor> spawn_coordinator(caf::actor_system& sys,
                                                     runtime::output_sink_actor sink,
                                                     const coordinator_options& opts) {
  if (!sink) return make_error(errc::invalid_argument, "coordinator: no output sink");
  if (opts.tick_interval.count() <= 0 || opts.job_timeout.count() < 0 ||
      opts.straggler_grace.count() < 0) {
    return make_error(errc::invalid_argument,
                      "coordinator: tick interval must be > 0, timeout and grace >= 0");
  }
  auto core = step_coordinator::create(
      {.world_size = opts.world_size,
       .finished_memory = opts.finished_memory,
       .straggler_grace = static_cast<uint64_t>(opts.straggler_grace.count())},
      opts.job_timeout);
  if (!core.ok()) return core.error();
  runtime::coordinator_actor handle =
      sys.spawn(coordinator, std::move(sink), std::move(core).value(), opts);
  return handle;
}

}  // namespace kvc::coordinator
