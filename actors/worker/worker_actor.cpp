#include "actors/worker/worker_actor.hpp"

#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/system_messages.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/runtime/error_bridge.hpp"

namespace kvc::worker {

namespace {

using self_pointer = worker_impl::stateful_pointer<worker_state>;

rank_id rank_of(self_pointer self) {
  return self->state.opts.registration.rank;
}

void notify(self_pointer self, const status& s) {
  if (self->state.opts.on_registered) self->state.opts.on_registered(s);
}

void send_report(self_pointer self, step_report r) {
  const auto& reg = self->state.opts.registration;
  self->send(self->state.coordinator, runtime::report_atom::value, reg.rank, reg.incarnation,
             r.step, std::move(r.events));
}

void arm_poll(self_pointer self) {
  worker_state& st = self->state;
  if (st.tick_armed || !st.runner->step_open()) return;
  st.tick_armed = true;
  self->delayed_send(self, st.opts.poll_interval, runtime::tick_atom::value);
}

void on_accepted(self_pointer self, runtime::coordinator_actor coordinator) {
  worker_state& st = self->state;
  const auto& reg = st.opts.registration;
  st.coordinator = std::move(coordinator);
  if (st.factory) {
    auto rt = st.factory();
    if (!rt) {
      notify(self, rt.error());
      self->quit(runtime::to_caf_error(rt.error()));
      return;
    }
    st.runtime = std::move(rt).value();
    st.runner.emplace(st.runtime->worker(), reg.rank, reg.incarnation);
  } else {
    st.stamper.emplace(reg.rank, reg.incarnation);
  }
  notify(self, status::success());
}

void execute(self_pointer self, const connector_metadata& meta) {
  worker_state& st = self->state;
  std::vector<step_report> reports;
  if (auto s = st.runner->execute(meta, reports); !s) {
    spdlog::error("worker {}: step {}: {}", rank_of(self), meta.step, s.to_string());
  }
  for (auto& r : reports) send_report(self, std::move(r));
  arm_poll(self);
}

void on_metadata(self_pointer self, const connector_metadata& meta) {
  worker_state& st = self->state;
  if (st.inbox) {
    st.inbox->push(meta);
  } else if (st.runner) {
    execute(self, meta);
  } else {  // unreachable: metadata only comes after the registration's answer
    spdlog::error("worker {}: step {} before registration: dropped", rank_of(self), meta.step);
  }
}

void on_tick(self_pointer self) {
  worker_state& st = self->state;
  st.tick_armed = false;
  if (!st.runner) return;
  if (auto r = st.runner->poll()) send_report(self, std::move(*r));
  arm_poll(self);
}

void on_jobs_done(self_pointer self, step_id step, const std::vector<job_result>& results) {
  worker_state& st = self->state;
  if (!st.stamper) {
    spdlog::error(
        "worker {}: results of step {} outside relay mode (or before registration): "
        "dropped",
        rank_of(self), step);
    return;
  }
  send_report(self, {step, st.stamper->stamp(step, results)});
}

worker_impl::behavior_type worker(self_pointer self, runtime::scheduler_actor scheduler,
                                  worker_options opts, runtime_factory factory,
                                  std::shared_ptr<metadata_queue> inbox) {
  worker_state& st = self->state;
  st.opts = std::move(opts);
  st.scheduler = std::move(scheduler);
  st.factory = std::move(factory);
  st.inbox = std::move(inbox);
  if (st.inbox) self->attach_functor([q = st.inbox] { q->close(); });
  self->monitor(st.scheduler);
  self->set_down_handler([self](caf::down_msg& dm) {
    if (dm.source == self->state.scheduler.address()) self->quit(dm.reason);
  });
  self->request(st.scheduler, st.opts.register_timeout, runtime::hello_atom::value,
                st.opts.registration, caf::actor_cast<runtime::worker_actor>(self))
      .await(
          [self](runtime::coordinator_actor& c, std::string& data_endpoint) {
            if (!data_endpoint.empty()) {  // an engine's scheduler_connector with ZeroMQ steps
              status st = make_error(errc::protocol_mismatch,
                                     "the scheduler sends steps over its ZeroMQ data plane (" +
                                         data_endpoint +
                                         "), which the worker actor does not speak: use the "
                                         "embedding API's worker_connector");
              notify(self, st);
              self->quit(runtime::to_caf_error(st));
              return;
            }
            on_accepted(self, std::move(c));
          },
             [self](caf::error& e) {
               notify(self, runtime::to_status(e));
               self->quit(std::move(e));
             });
  return {
      [self](const connector_metadata& meta) { on_metadata(self, meta); },
      [self](runtime::tick_atom) { on_tick(self); },
      [self](jobs_done_atom, step_id step, const std::vector<job_result>& results) {
        on_jobs_done(self, step, results);
      },
  };
}

}  // namespace

result<worker_impl> spawn_executing_worker(caf::actor_system& sys,
                                           runtime::scheduler_actor scheduler, worker_options opts,
                                           runtime_factory factory) {
  if (!scheduler) return make_error(errc::invalid_argument, "worker: no scheduler");
  if (!factory) return make_error(errc::invalid_argument, "worker: no runtime factory");
  if (opts.poll_interval.count() <= 0) {
    return make_error(errc::invalid_argument, "worker: the poll interval must be > 0");
  }
  return sys.spawn(worker, std::move(scheduler), std::move(opts), std::move(factory),
                   std::shared_ptr<metadata_queue>{});
}

result<worker_impl> spawn_relay_worker(caf::actor_system& sys, runtime::scheduler_actor scheduler,
                                       worker_options opts, std::shared_ptr<metadata_queue> inbox) {
  if (!scheduler) return make_error(errc::invalid_argument, "worker: no scheduler");
  if (!inbox) return make_error(errc::invalid_argument, "worker: no metadata queue");
  return sys.spawn(worker, std::move(scheduler), std::move(opts), runtime_factory{},
                   std::move(inbox));
}

}  // namespace kvc::worker
