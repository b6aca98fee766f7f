// The bodies of `kvconnect scheduler` and `kvconnect worker`: the only launch TU that includes
// CAF. Each builds its actor system from the runtime preset, prints JSON lines on stdout (what a
// launcher or a test reads: "listening" with the port, "registered", "ready", "smoke",
// "stopped") and logs to stderr. Shutdown order: stop the workers (scheduler), end the long-lived
// actors, then let ~actor_system run; the segment is removed by the scheduler, its creator.
#include "launch/role_options.hpp"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/publish.hpp>
#include <caf/io/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <nlohmann/json.hpp>

#include "actors/runtime/error_bridge.hpp"
#include "actors/runtime/tcp_probe.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "actors/worker/worker_actor.hpp"
#include "launch/signal_watcher.hpp"
#include "launch/smoke_plan.hpp"

namespace kvc::launch {

namespace {

using std::chrono::milliseconds;

void use_stderr_logging(const std::string& role) {
  auto logger =
      std::make_shared<spdlog::logger>("kvc", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + role + "] [%l] %v");
  spdlog::set_default_logger(std::move(logger));
}

/// One machine-readable line on stdout, flushed (readers wait for it).
void emit(const nlohmann::json& line) {
  std::cout << line.dump() << std::endl;
}

bool clean_exit(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
}

// --- scheduler ---

class scheduler_process {
 public:
  scheduler_process(const scheduler_process_options& o, const pool_plan& plan,
                    signal_watcher& signals, shm::segment& pool, caf::actor_system& sys)
      : o_(o), plan_(plan), signals_(signals), pool_(pool), sys_(sys) {}

  int run(std::optional<smoke_plan> smoke) {
    auto outputs = std::make_shared<scheduler::output_queue>();
    scheduler::scheduler_options so;
    so.handshake = {.tp_size = o_.topology.tp_size,
                    .pp_size = o_.topology.pp_size,
                    .node = o_.topology.node,
                    .segment = plan_.segment,
                    .layout_checksum = plan_.layout_checksum,
                    .token = o_.token};
    so.coordinator.job_timeout = milliseconds{o_.job_timeout_ms};
    auto sched = scheduler::spawn_scheduler(sys_, so, outputs);
    if (!sched) return fail("cannot start: " + sched.error().to_string());
    auto port =
        caf::io::publish(caf::actor_cast<runtime::scheduler_service_actor>(*sched), o_.port,
                         "127.0.0.1");
    if (!port) {
      caf::anon_send_exit(*sched, caf::exit_reason::user_shutdown);
      return fail("cannot listen on 127.0.0.1:" + std::to_string(o_.port) + ": " +
                  sys_.render(port.error()));
    }
    emit({{"event", "listening"},
          {"port", *port},
          {"segment", plan_.segment},
          {"layout_checksum", plan_.layout_checksum},
          {"world_size", plan_.geometry.world_size},
          {"pid", ::getpid()}});
    spdlog::info(
        "scheduler: listening on 127.0.0.1:{} for {} ranks; segment {} ({} slots of {} "
        "bytes per rank)",
        *port, plan_.geometry.world_size, plan_.segment, plan_.geometry.num_slots,
        plan_.geometry.slot_bytes);
    signals_.on_signal([outputs](int) { outputs->close(); });
    const int code = smoke ? drive(*sched, *outputs, *smoke) : (signals_.wait(), 0);
    if (int sig = signals_.signalled()) spdlog::info("scheduler: signal {}: shutting down", sig);
    signals_.on_signal(nullptr);
    stop_workers(*sched);
    caf::anon_send_exit(*sched, caf::exit_reason::user_shutdown);  // ends the coordinator too
    return code;
  }

 private:
  static int fail(const std::string& message) {
    std::cerr << "kvconnect scheduler: " << message << std::endl;
    return 1;
  }

  /// Smoke mode: waits for every rank, then runs the plan's steps one after the other.
  int drive(const scheduler::scheduler_impl& sched, scheduler::output_queue& outputs,
            smoke_plan& plan) {
    caf::scoped_actor self{sys_};
    status ready;
    self->request(sched, milliseconds{o_.ready_timeout_ms}, scheduler::ready_atom::value)
        .receive([](uint32_t) {}, [&](caf::error& e) { ready = runtime::to_status(e); });
    if (!ready) {
      spdlog::error("smoke: not every rank registered within {} ms: {}", o_.ready_timeout_ms,
                    ready.to_string());
      return 1;
    }
    emit({{"event", "ready"}, {"world_size", plan_.geometry.world_size}});
    for (uint64_t k = 0; k < o_.smoke_steps; ++k) {
      caf::anon_send(sched, plan.step(k));
      while (!plan.done(k)) {
        auto out = outputs.pop_for(milliseconds{o_.step_timeout_ms});
        if (!out) {
          if (signals_.signalled()) return 1;
          spdlog::error("smoke: step {} got no result within {} ms", k + 1, o_.step_timeout_ms);
          return 1;
        }
        if (auto st = plan.on_output(*out, pool_); !st) {
          spdlog::error("{}", st.to_string());
          return 1;
        }
      }
    }
    emit({{"event", "smoke"},
          {"steps", o_.smoke_steps},
          {"jobs_ok", plan.jobs_ok()},
          {"slots_checked", plan.slots_checked()},
          {"bytes", plan.bytes_moved()}});
    return 0;
  }

  void stop_workers(const scheduler::scheduler_impl& sched) {
    caf::scoped_actor self{sys_};
    self->request(sched, milliseconds{o_.stop_timeout_ms}, scheduler::stop_atom::value)
        .receive(
            [](uint32_t n) {
              emit({{"event", "stopped"}, {"workers", n}});
            },
            [this](caf::error& e) {
              spdlog::warn("scheduler: stopping the workers: {}", sys_.render(e));
            });
  }

  const scheduler_process_options& o_;
  const pool_plan& plan_;
  signal_watcher& signals_;
  shm::segment& pool_;
  caf::actor_system& sys_;
};

// --- worker ---

class worker_process {
 public:
  worker_process(const worker_process_options& o, const pool_plan& plan, signal_watcher& signals,
                 caf::actor_system& sys)
      : o_(o), plan_(plan), signals_(signals), sys_(sys) {}

  int run() {
    // CAF's connect has no limit of its own: find out first whether anything answers.
    if (auto st = runtime::probe_tcp(o_.host, o_.port,
                                     std::chrono::milliseconds{o_.register_timeout_ms});
        !st) {
      return fail(1, "cannot reach the scheduler at " + st.message());
    }
    auto sched = caf::io::remote_actor<runtime::scheduler_actor>(sys_, o_.host, o_.port);
    if (!sched) {
      return fail(1, "cannot reach the scheduler at " + o_.host + ":" + std::to_string(o_.port) +
                         ": " + sys_.render(sched.error()));
    }
    // Written by the actor, read here after its down_msg (which happens after).
    auto outcome = std::make_shared<std::optional<status>>();
    auto w = worker::spawn_executing_worker(sys_, *sched, options(outcome), factory());
    if (!w) return fail(1, w.error().to_string());
    caf::scoped_actor self{sys_};
    self->monitor(*w);
    signals_.on_signal([h = *w](int) { caf::anon_send_exit(h, caf::exit_reason::user_shutdown); });
    caf::error reason;
    self->receive([&](caf::down_msg& dm) { reason = dm.reason; });
    signals_.on_signal(nullptr);
    if (!outcome->has_value()) return fail(1, "ended before registering: " + sys_.render(reason));
    if (!(*outcome)->ok()) return fail(2, "registration failed: " + (*outcome)->to_string());
    if (!clean_exit(reason)) return fail(1, "stopped: " + sys_.render(reason));
    emit({{"event", "stopped"}, {"rank", o_.rank}});
    return 0;
  }

 private:
  int fail(int code, const std::string& message) const {
    std::cerr << "kvconnect worker: rank " << o_.rank << ": " << message << std::endl;
    return code;
  }

  worker::worker_options options(std::shared_ptr<std::optional<status>> outcome) const {
    const uint32_t tp = o_.topology.tp_size;
    worker::worker_options wo;
    wo.registration = {.protocol_version = runtime::protocol_version,
                       .rank = o_.rank,
                       .tp_size = tp,
                       .pp_size = o_.topology.pp_size,
                       .tp_rank = o_.rank % tp,
                       .pp_rank = o_.rank / tp,
                       .node = o_.topology.node,
                       .incarnation = o_.incarnation,
                       .segment = plan_.segment,
                       .layout_checksum = plan_.layout_checksum,
                       .token = o_.token,
                       .pid = ::getpid()};
    wo.register_timeout = milliseconds{o_.register_timeout_ms};
    wo.poll_interval = std::chrono::microseconds{o_.poll_us};
    wo.on_registered = [outcome, rank = o_.rank, inc = o_.incarnation](const status& s) {
      *outcome = s;
      if (!s.ok()) return;
      spdlog::info("worker: registered as rank {} (incarnation {})", rank, inc);
      emit({{"event", "registered"}, {"rank", rank}, {"incarnation", inc}, {"pid", ::getpid()}});
    };
    return wo;
  }

  worker::runtime_factory factory() const {
    worker::rank_runtime_options ro{.rank = o_.rank,
                                    .kv = o_.pool.kv,
                                    .engine = {.backend = o_.backend, .device = o_.device},
                                    .segment = plan_.segment,
                                    .geometry = plan_.geometry,
                                    .prefault = o_.prefault};
    return [ro] { return worker::rank_runtime::open(ro); };
  }

  const worker_process_options& o_;
  const pool_plan& plan_;
  signal_watcher& signals_;
  caf::actor_system& sys_;
};

}  // namespace

int run_scheduler_process(const scheduler_process_options& o) {
  use_stderr_logging("scheduler");
  auto plan = derive_pool(o.topology, o.pool);
  if (!plan) {
    std::cerr << "kvconnect scheduler: " << plan.error().to_string() << std::endl;
    return 1;
  }
  std::optional<smoke_plan> smoke;
  if (o.smoke_steps > 0) {
    auto s = smoke_plan::create(plan->geometry.world_size, o.pool.slots, o.pool.kv);
    if (!s) {
      std::cerr << "kvconnect scheduler: " << s.error().to_string() << std::endl;
      return 1;
    }
    smoke.emplace(std::move(s).value());
  }
  signal_watcher signals;  // before any thread starts
  auto pool = shm::segment::create(plan->segment, plan->geometry,
                                   {.prefault = o.prefault, .remove_on_close = true});
  if (!pool) {
    std::cerr << "kvconnect scheduler: cannot create the shm segment " << plan->segment << ": "
              << pool.error().to_string() << std::endl;
    return 1;
  }
  caf::actor_system_config cfg;
  runtime::configure(cfg, o.network.runtime(), /*network=*/true);
  caf::actor_system sys{cfg};  // destroyed before the segment: no actor outlives the pool
  return scheduler_process{o, *plan, signals, *pool, sys}.run(std::move(smoke));
}

int run_worker_process(const worker_process_options& o) {
  use_stderr_logging("worker " + std::to_string(o.rank));
  auto plan = derive_pool(o.topology, o.pool);
  std::string error;
  if (!plan) {
    error = plan.error().to_string();
  } else if (o.rank >= plan->geometry.world_size) {
    error = "--rank " + std::to_string(o.rank) + " is outside the world of " +
            std::to_string(plan->geometry.world_size) + " ranks";
  } else if (o.poll_us == 0 || o.port == 0) {
    error = "--poll-us and --port must be > 0";
  }
  if (!error.empty()) {
    std::cerr << "kvconnect worker: rank " << o.rank << ": " << error << std::endl;
    return 1;
  }
  signal_watcher signals;  // before any thread starts
  caf::actor_system_config cfg;
  runtime::configure(cfg, o.network.runtime(), /*network=*/true);
  caf::actor_system sys{cfg};
  return worker_process{o, *plan, signals, sys}.run();
}

}  // namespace kvc::launch
