#include "actors/scheduler/scheduler_actor.hpp"

#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/error_bridge.hpp"

namespace kvc::scheduler {

namespace {

using self_pointer = scheduler_impl::stateful_pointer<scheduler_state>;

std::vector<job_id> ids_of(const std::vector<transfer_job>& jobs) {
  std::vector<job_id> ids;
  ids.reserve(jobs.size());
  for (const transfer_job& j : jobs) ids.push_back(j.id);
  return ids;
}

void deliver_all(std::vector<caf::typed_response_promise<uint32_t>>& waiters, uint32_t value) {
  for (auto& rp : waiters) rp.deliver(value);
  waiters.clear();
}

caf::result<runtime::coordinator_actor, std::string> admit(self_pointer self,
                                              const runtime::worker_registration& reg,
                                              const runtime::worker_actor& worker) {
  scheduler_state& st = self->state;
  status s = !worker ? make_error(errc::invalid_argument, "registration without a worker")
             : st.stopping
                 ? make_error(errc::not_ready, "registration of rank " + std::to_string(reg.rank) +
                                                   " refused: the scheduler is stopping")
                 : st.registry->admit(reg);
  if (!s) {
    spdlog::warn("scheduler: {}", s.to_string());
    return runtime::to_caf_error(s);
  }
  st.workers[reg.rank] = worker;
  self->monitor(worker);
  self->send(st.coordinator, runtime::rank_up_atom::value, reg.rank, reg.incarnation);
  spdlog::info(
      "scheduler: registered rank {} (tp_rank {}, pp_rank {}, incarnation {}, pid {}); "
      "{}/{} ranks live",
      reg.rank, reg.tp_rank, reg.pp_rank, reg.incarnation, reg.pid, st.registry->live_count(),
      st.registry->world_size());
  if (st.registry->complete()) deliver_all(st.ready_waiters, st.registry->world_size());
  return {st.coordinator, st.data_endpoint};
}

void fan_out(self_pointer self, const connector_metadata& meta) {
  scheduler_state& st = self->state;
  if (auto s = st.registry->begin_step(meta.step); !s) {
    spdlog::error("scheduler: dropped a step: {}", s.to_string());
    return;
  }
  self->send(st.coordinator, runtime::expect_atom::value, meta.step, ids_of(meta.loads),
             ids_of(meta.stores));
  for (const auto& w : st.workers) {
    if (w) self->send(w, meta);
  }
}

/// An engine's scheduler thread authenticates (its registration is checked like rank 0's) and
/// subscribes `sink` to the step outputs. One engine at a time.
caf::result<uint32_t> subscribe(self_pointer self, const runtime::worker_registration& reg,
                                const runtime::output_sink_actor& sink) {
  scheduler_state& st = self->state;
  status s = !sink ? make_error(errc::invalid_argument, "engine subscription without a sink")
             : st.engine && st.engine != sink
                 ? make_error(errc::not_ready, "another engine is subscribed")
                 : runtime::validate_registration(st.registry->expectation(), reg);
  if (!s) {
    s = make_error(s.code(), "engine (pid " + std::to_string(reg.pid) + ") refused: " +
                                 s.message());
    spdlog::warn("scheduler: {}", s.to_string());
    return runtime::to_caf_error(s);
  }
  st.engine = sink;
  self->monitor(sink);
  spdlog::info("scheduler: engine (pid {}) subscribed", reg.pid);
  return st.registry->world_size();
}

void submit(self_pointer self, const connector_metadata& meta) {
  const runtime::output_sink_actor& e = self->state.engine;
  if (e && self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(e)) {
    fan_out(self, meta);
  } else {
    spdlog::warn("scheduler: dropped step {} from a sender that is not the subscribed engine",
                 meta.step);
  }
}

void on_down(self_pointer self, const caf::down_msg& dm) {
  scheduler_state& st = self->state;
  if (st.engine && st.engine.address() == dm.source) {
    spdlog::info("scheduler: engine unsubscribed: {}", self->system().render(dm.reason));
    st.engine = runtime::output_sink_actor{};
    return;
  }
  for (rank_id r = 0; r < st.workers.size(); ++r) {
    if (!st.workers[r] || st.workers[r].address() != dm.source) continue;
    st.workers[r] = runtime::worker_actor{};
    (void)st.registry->remove(r);  // live by construction: workers[r] was set
    self->send(st.coordinator, runtime::rank_down_atom::value, r);
    if (st.stopping) {
      spdlog::info("scheduler: rank {} stopped", r);
    } else {
      spdlog::warn("scheduler: rank {} lost: {}", r, self->system().render(dm.reason));
    }
    if (st.stopping && st.registry->live_count() == 0) deliver_all(st.stop_waiters, st.stopped);
    return;
  }
}

caf::typed_response_promise<uint32_t> stop(self_pointer self) {
  scheduler_state& st = self->state;
  auto rp = self->make_response_promise<uint32_t>();
  if (!st.stopping) {
    st.stopping = true;
    for (const auto& w : st.workers) {
      if (!w) continue;
      self->send_exit(w, caf::exit_reason::user_shutdown);
      ++st.stopped;
    }
  }
  if (st.registry->live_count() == 0) {
    rp.deliver(st.stopped);
  } else {
    st.stop_waiters.push_back(rp);
  }
  return rp;
}

scheduler_impl::behavior_type scheduler(self_pointer self, worker_registry registry,
                                        std::shared_ptr<output_queue> outputs,
                                        runtime::coordinator_actor coordinator,
                                        coordinator::coordinator_options copts,
                                        std::string data_endpoint) {
  scheduler_state& st = self->state;
  st.data_endpoint = std::move(data_endpoint);
  st.workers.resize(registry.world_size());
  st.registry.emplace(std::move(registry));
  st.outputs = std::move(outputs);
  self->attach_functor([q = st.outputs] { q->close(); });
  if (!coordinator) {
    auto c = coordinator::spawn_coordinator(
        self->system(), caf::actor_cast<runtime::output_sink_actor>(self), copts);
    if (!c) {  // spawn_scheduler validated the options: not expected
      spdlog::error("scheduler: cannot spawn the coordinator: {}", c.error().to_string());
      self->quit(runtime::to_caf_error(c.error()));
    } else {
      coordinator = *c;
      self->link_to(coordinator);
    }
  }
  st.coordinator = std::move(coordinator);
  self->set_down_handler([self](caf::down_msg& dm) { on_down(self, dm); });
  return {
      [self](runtime::hello_atom, const runtime::worker_registration& reg,
             const runtime::worker_actor& worker) { return admit(self, reg, worker); },
      [self](const connector_metadata& meta) { fan_out(self, meta); },
      [self](const connector_output& out) {
        if (self->state.engine) {
          self->send(self->state.engine, out);
        } else {
          self->state.outputs->push(out);
        }
      },
      [self](runtime::engine_hello_atom, const runtime::worker_registration& reg,
             const runtime::output_sink_actor& sink) { return subscribe(self, reg, sink); },
      [self](runtime::submit_atom, const connector_metadata& meta) { submit(self, meta); },
      [self](ready_atom) {
        auto rp = self->make_response_promise<uint32_t>();
        const worker_registry& reg = *self->state.registry;
        if (reg.complete()) {
          rp.deliver(reg.world_size());
        } else {
          self->state.ready_waiters.push_back(rp);
        }
        return rp;
      },
      [self](stop_atom) { return stop(self); },
  };
}

}  // namespace

result<scheduler_impl> spawn_scheduler(caf::actor_system& sys, const scheduler_options& opts,
                                       std::shared_ptr<output_queue> outputs,
                                       runtime::coordinator_actor coordinator) {
  if (!outputs) return make_error(errc::invalid_argument, "scheduler: no output queue");
  auto registry = worker_registry::create(opts.handshake);
  if (!registry) return registry.error();
  coordinator::coordinator_options copts = opts.coordinator;
  copts.world_size = registry->world_size();
  if (!coordinator && (copts.tick_interval.count() <= 0 || copts.job_timeout.count() < 0 ||
                       copts.straggler_grace.count() < 0)) {
    return make_error(errc::invalid_argument,
                      "scheduler: coordinator tick interval must be > 0, timeout and grace >= 0");
  }
  return sys.spawn(scheduler, std::move(registry).value(), std::move(outputs),
                   std::move(coordinator), copts, opts.data_endpoint);
}

}  // namespace kvc::scheduler
