#include "actors/scheduler/scheduler_actor.hpp"

#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/channel/transport.hpp"
#include "actors/control/error_bridge.hpp"

namespace kvc::scheduler {

namespace {

using self_pointer = scheduler_impl::stateful_pointer<scheduler_state>;

void deliver_all(std::vector<caf::typed_response_promise<uint32_t>>& waiters, uint32_t value) {
  for (auto& rp : waiters) rp.deliver(value);
  waiters.clear();
}

/// One control-plane record on the scheduler's track (trace off: nothing).
void record(const scheduler_state& st, trace::direction dir, std::string type, rank_id rank,
            std::string note = {}) {
  if (!st.tracer) return;
  trace::trace_record r;
  r.dir = dir;
  r.track = "scheduler";
  r.rank = rank;
  r.msg = trace::message_id(type, -1, channel::peer_id(rank, st.incarnations[rank]));
  r.type = std::move(type);
  r.note = std::move(note);
  st.tracer->emit(std::move(r));
}

caf::result<control::coordinator_actor, std::string> admit(self_pointer self,
                                                           const worker_registration& reg,
                                                           const control::worker_actor& worker) {
  scheduler_state& st = self->state;
  status s = worker ? st.registry->admit(reg)
                    : make_error(errc::invalid_argument, "registration without a worker");
  if (st.tracer && reg.rank < st.incarnations.size()) {
    const uint32_t previous = st.incarnations[reg.rank];
    st.incarnations[reg.rank] = reg.incarnation;
    record(st, trace::direction::receive, "registration", reg.rank, s ? "ok" : s.to_string());
    if (!s) st.incarnations[reg.rank] = previous;
  }
  if (!s) {
    spdlog::warn("scheduler: {}", s.to_string());
    return control::to_caf_error(s);
  }
  st.workers[reg.rank] = worker;
  self->monitor(worker);
  self->send(st.coordinator, control::rank_up_atom::value, reg.rank, reg.incarnation);
  record(st, trace::direction::local, "rank_up", reg.rank);
  spdlog::info(
      "scheduler: registered rank {} (tp_rank {}, pp_rank {}, incarnation {}, pid {}); "
      "{}/{} ranks live",
      reg.rank, reg.tp_rank, reg.pp_rank, reg.incarnation, reg.pid, st.registry->live_count(),
      st.registry->world_size());
  if (st.registry->complete()) deliver_all(st.ready_waiters, st.registry->world_size());
  return {st.coordinator, st.channel_endpoint};
}

void on_down(self_pointer self, const caf::down_msg& dm) {
  scheduler_state& st = self->state;
  for (rank_id r = 0; r < st.workers.size(); ++r) {
    if (!st.workers[r] || st.workers[r].address() != dm.source) continue;
    st.workers[r] = control::worker_actor{};
    (void)st.registry->remove(r);  // live by construction: workers[r] was set
    self->send(st.coordinator, control::rank_down_atom::value, r);
    record(st, trace::direction::local, "rank_down", r,
           st.registry->stopping() ? "stopped" : "lost: " + self->system().render(dm.reason));
    if (st.registry->stopping()) {
      spdlog::info("scheduler: rank {} stopped", r);
    } else {
      spdlog::warn("scheduler: rank {} lost: {}", r, self->system().render(dm.reason));
    }
    if (st.registry->stop_complete()) deliver_all(st.stop_waiters, st.registry->stopped());
    return;
  }
}

caf::typed_response_promise<uint32_t> stop(self_pointer self) {
  scheduler_state& st = self->state;
  auto rp = self->make_response_promise<uint32_t>();
  for (rank_id r : st.registry->begin_stop()) {
    // Recorded before it goes: the rank may record its receive before send() returns here.
    record(st, trace::direction::send, "stop", r);
    self->send(st.workers[r], control::stop_atom::value);
  }
  if (st.registry->stop_complete()) {
    rp.deliver(st.registry->stopped());
  } else {
    st.stop_waiters.push_back(rp);
  }
  return rp;
}

caf::typed_response_promise<uint32_t> ready(self_pointer self) {
  auto rp = self->make_response_promise<uint32_t>();
  const worker_registry& reg = *self->state.registry;
  if (reg.complete()) {
    rp.deliver(reg.world_size());
  } else {
    self->state.ready_waiters.push_back(rp);
  }
  return rp;
}

scheduler_impl::behavior_type scheduler(self_pointer self, worker_registry registry,
                                        control::coordinator_actor coordinator,
                                        std::string channel_endpoint,
                                        std::shared_ptr<trace::tracer> tracer) {
  scheduler_state& st = self->state;
  st.workers.resize(registry.world_size());
  st.incarnations.resize(registry.world_size());
  st.tracer = std::move(tracer);
  st.registry.emplace(std::move(registry));
  st.coordinator = std::move(coordinator);
  st.channel_endpoint = std::move(channel_endpoint);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
      [self](control::hello_atom, const worker_registration& reg,
             const control::worker_actor& worker) { return admit(self, reg, worker); },
      [self](control::ready_atom) { return ready(self); },
      [self](control::stop_atom) { return stop(self); },
  };
}

}  // namespace

result<scheduler_impl> spawn_scheduler(caf::actor_system& sys, const scheduler_options& opts,
                                       control::coordinator_actor coordinator) {
  if (!coordinator) return make_error(errc::invalid_argument, "scheduler: no coordinator");
  auto registry = worker_registry::create(opts.handshake);
  if (!registry) return registry.error();
  return sys.spawn(scheduler, std::move(registry).value(), std::move(coordinator),
                   opts.channel_endpoint, opts.tracer);
}

}  // namespace kvc::scheduler
