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

void log_rejected(const completion_event& ev, report_outcome outcome) {
  if (is_rejected(outcome)) {
    spdlog::warn("coordinator: dropped report of job {} from rank {} incarnation {}: {}", ev.job,
                 ev.rank, ev.incarnation, to_string(outcome));
  } else if (outcome == report_outcome::duplicate) {
    spdlog::debug("coordinator: duplicate report of job {} from rank {}", ev.job, ev.rank);
  }
}

void log_failure(const char* what, const status& st) {
  if (!st.ok()) spdlog::warn("coordinator: {}: {}", what, st.to_string());
}

/// After every message: hand out released outputs, keep the deadline timer running if needed.
void publish(self_pointer self) {
  coordinator_state& st = self->state;
  while (auto out = st.agg->poll_output()) self->send(st.sink, std::move(*out));
  if (!st.tick_armed && st.agg->needs_expire()) {
    st.tick_armed = true;
    self->delayed_send(self, st.tick_interval, runtime::tick_atom::value);
  }
}

}  // namespace

coordinator_impl::behavior_type coordinator(self_pointer self, runtime::output_sink_actor sink,
                                            completion_aggregator agg, coordinator_options opts) {
  coordinator_state& st = self->state;
  st.agg.emplace(std::move(agg));
  st.sink = std::move(sink);
  st.job_timeout = opts.job_timeout;
  st.tick_interval = opts.tick_interval;
  return {
      [self](runtime::report_atom, rank_id rank, uint32_t incarnation, step_id step,
             const std::vector<completion_event>& events) {
        completion_aggregator& agg = *self->state.agg;
        for (const completion_event& ev : events) log_rejected(ev, agg.on_report(ev));
        log_failure("closing a step", agg.on_step_closed(rank, incarnation, step));
        publish(self);
      },
      [self](runtime::expect_atom, step_id step, const std::vector<job_id>& loads,
             const std::vector<job_id>& stores) {
        coordinator_state& st = self->state;
        std::optional<uint64_t> deadline;
        if (st.job_timeout.count() > 0) {
          deadline = now_ns(self) + static_cast<uint64_t>(st.job_timeout.count());
        }
        for (job_id j : loads)
          log_failure("expect", st.agg->expect(j, transfer_kind::load, step, deadline));
        for (job_id j : stores)
          log_failure("expect", st.agg->expect(j, transfer_kind::store, step, deadline));
        publish(self);
      },
      [self](runtime::rank_up_atom, rank_id rank, uint32_t incarnation) {
        auto failed = self->state.agg->on_rank_registered(rank, incarnation);
        if (!failed.ok()) {
          log_failure("registering a rank", failed.error());
        } else if (*failed > 0) {
          spdlog::warn("coordinator: rank {} restarted as incarnation {}: {} jobs failed", rank,
                       incarnation, *failed);
        }
        publish(self);
      },
      [self](runtime::rank_down_atom, rank_id rank) {
        auto failed = self->state.agg->on_rank_lost(rank);
        if (!failed.ok()) {
          log_failure("losing a rank", failed.error());
        } else {
          spdlog::warn("coordinator: rank {} lost: {} jobs failed", rank, *failed);
        }
        publish(self);
      },
      [self](runtime::tick_atom) {
        self->state.tick_armed = false;
        if (size_t n = self->state.agg->expire(now_ns(self)); n > 0) {
          spdlog::warn("coordinator: {} jobs timed out", n);
        }
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
  auto agg = completion_aggregator::create(
      {.world_size = opts.world_size,
       .finished_memory = opts.finished_memory,
       .straggler_grace = static_cast<uint64_t>(opts.straggler_grace.count())});
  if (!agg.ok()) return agg.error();
  runtime::coordinator_actor handle =
      sys.spawn(coordinator, std::move(sink), std::move(agg).value(), opts);
  return handle;
}

}  // namespace kvc::coordinator
