// The scheduler side of each engine (engine.hpp): serving, the smoke run, the simulated engine.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "launch/engines/engine.hpp"
#include "launch/engines/sim/engine_loop.hpp"
#include "launch/engines/sim/executor_channel.hpp"
#include "launch/engines/sim/run_comparison.hpp"
#include "launch/engines/sim/run_report.hpp"
#include "launch/engines/smoke/smoke_engine.hpp"

namespace kvc::launch {

namespace {

using std::chrono::milliseconds;

/// How often a waiting loop looks at signals.
constexpr milliseconds idle_slice{100};

/// --ready-timeout-ms grown by what faulting in and pinning a rank's region may take.
milliseconds ready_wait(const scheduler_process_options& o) {
  auto plan = derive_pool(o.topology, o.pool);
  return ready_timeout_for(o.ready_timeout_ms, plan ? plan->geometry.rank_bytes() : 0);
}

/// Waits up to ready_wait(o) for every rank to be registered again, in slices, so that a
/// signal ends the wait (success: the caller looks at the signal).
status wait_for_restarts(embed::scheduler_connector& sc, const scheduler_process_options& o,
                         signal_watcher& signals) {
  const milliseconds ready = ready_wait(o);
  const auto deadline = std::chrono::steady_clock::now() + ready;
  while (!signals.signalled()) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - std::chrono::steady_clock::now());
    auto st = sc.wait_for_workers(std::clamp(left, milliseconds{1}, idle_slice));
    if (st || st.code() != errc::timeout) return st;
    if (left <= idle_slice) {
      return make_error(errc::timeout, "a lost rank did not register again within " +
                                           std::to_string(ready.count()) + " ms");
    }
  }
  return status::success();  // signalled: the caller ends the run
}

/// {"event":"rank_lost","rank":r,"incarnation":i} once for each rank the coordinator holds lost
/// (the launcher ends a hung process it stopped on this line). `told`: the losses said so far.
void report_lost_ranks(const embed::scheduler_connector& sc, const engine_io& io,
                       std::set<std::pair<rank_id, uint32_t>>& told) {
  for (const embed::lost_rank& l : sc.lost_ranks()) {
    if (!told.insert({l.rank, l.incarnation}).second) continue;
    io.emit(rank_lost_event{l.rank, l.incarnation});
  }
}

/// Without steps of its own: the coordinator still takes what arrives (rank arrivals and
/// departures), as an idle engine's scheduler loop would, until a signal.
int serve_until_signal(embed::scheduler_connector& sc, signal_watcher& signals) {
  while (signals.wait_for(idle_slice) == 0) {
    if (auto up = sc.update_connector_output(); !up) {
      spdlog::error("scheduler: {}", up.error().to_string());
      return 1;
    }
  }
  return 0;
}

/// The block sizes of an engine without a model of its own (serving, the smoke run).
void configure_synthetic(embed::scheduler_connector_config& cfg,
                         const scheduler_process_options& o) {
  cfg.planner.gpu_block_size = smoke_engine::gpu_block_size;
  cfg.planner.offloaded_block_size = o.pool.kv.block_factor * smoke_engine::gpu_block_size;
}

class serve_scheduler final : public scheduler_engine {
 public:
  serve_scheduler(const scheduler_process_options& o, engine_io io) : o_(o), io_(std::move(io)) {}
  void configure(embed::scheduler_connector_config& cfg) const override {
    configure_synthetic(cfg, o_);
  }
  result<std::string> open() override { return std::string{}; }
  int run(embed::scheduler_connector& sc) override { return serve_until_signal(sc, io_.signals); }
  fault_outcome outcome(const embed::scheduler_connector& sc, uint64_t seed) const override {
    return scheduler_outcome(sc, seed);
  }

 private:
  const scheduler_process_options& o_;
  engine_io io_;
};

/// The smoke run: waits for every rank, then runs smoke_engine's steps one after the other;
/// with serve_after_smoke, serves once they passed.
class smoke_scheduler final : public scheduler_engine {
 public:
  smoke_scheduler(smoke_engine engine, const scheduler_process_options& o, engine_io io)
      : engine_(std::move(engine)), o_(o), io_(std::move(io)) {}
  void configure(embed::scheduler_connector_config& cfg) const override {
    configure_synthetic(cfg, o_);
  }
  result<std::string> open() override { return std::string{}; }
  int run(embed::scheduler_connector& sc) override {
    const int code = steps(sc);
    if (code == 0 && o_.serve_after_smoke) return serve_until_signal(sc, io_.signals);
    return code;
  }
  fault_outcome outcome(const embed::scheduler_connector& sc, uint64_t seed) const override {
    return scheduler_outcome(sc, seed);
  }

 private:
  int steps(embed::scheduler_connector& sc) {
    if (auto st = sc.wait_for_workers(ready_wait(o_)); !st) {
      spdlog::error("smoke: not every rank registered within {} ms: {}", ready_wait(o_).count(),
                    st.to_string());
      return 1;
    }
    io_.emit(ready_event{o_.topology.world_size()});
    std::set<std::pair<rank_id, uint32_t>> told;
    for (uint64_t k = 0; k < o_.smoke_steps; ++k) {
      if (io_.signals.signalled()) return 1;
      report_lost_ranks(sc, io_, told);
      if (engine_.needs_workers()) {  // a rank was lost: its restart registers again
        if (auto st = wait_for_restarts(sc, o_, io_.signals); !st) {
          spdlog::error("{}", st.to_string());
          return 1;
        }
        if (io_.signals.signalled()) return 1;
        engine_.workers_back();
        spdlog::info("smoke: every rank is registered again (step {})", k + 1);
      }
      if (auto st = engine_.run_step(sc, k, milliseconds{o_.step_timeout_ms}); !st) {
        spdlog::error("{}", st.to_string());
        return 1;
      }
      io_.emit(progress_event{k + 1,
                              {{"event", "progress"},
                               {"step", k + 1},
                               {"steps", o_.smoke_steps},
                               {"jobs_ok", engine_.jobs_ok()},
                               {"jobs_failed", engine_.jobs_failed()}}});
    }
    io_.emit(smoke_event{.steps = o_.smoke_steps,
                         .jobs_ok = engine_.jobs_ok(),
                         .jobs_failed = engine_.jobs_failed(),
                         .rounds_interrupted = engine_.rounds_interrupted(),
                         .slots_checked = engine_.slots_checked(),
                         .bytes = engine_.bytes_moved()});
    return 0;
  }

  smoke_engine engine_;
  const scheduler_process_options& o_;
  engine_io io_;
};

/// CPU time of the calling thread, ns.
double thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// The simulated engine's scheduler loop: waits for every rank and its executor-channel
/// subscription, runs the workload (each step's model input published to the workers), prints
/// its finished requests ("finished", for `launch --compare`) and the run's figures ("sim"),
/// kept as its run report once the run started (the fault report's source too), and then ends
/// the channel (a worker without offloading ends with it: the launcher reads these lines
/// first). 0 when the scheduler side saw no problem (nothing hung, pending or leaked); the
/// workers report their load checks themselves.
///
/// Without a connector (offloading off) the ranks are the channel's subscribers alone: the
/// loop runs run_engine_loop's run without offloading, and no rank can be lost and come back
/// (no connector tracks them; the factory refuses rank restarts, and a worker that exits ends
/// the launch).
class sim_scheduler final : public scheduler_engine {
 public:
  sim_scheduler(const scheduler_process_options& o, engine_io io) : o_(o), io_(std::move(io)) {}
  void configure(embed::scheduler_connector_config& cfg) const override {
    cfg.planner = o_.config->plan.scheduler.planner;  // block sizes, policy
  }
  result<std::string> open() override {
    const uint16_t port = executor_port_of(o_.config->config.runtime);
    auto p = sim::executor_publisher::create(o_.host, port, o_.token);
    if (!p) return p.error();
    executor_ = std::move(p).value();
    return executor_->endpoint();
  }
  int run(embed::scheduler_connector& sc) override { return drive(&sc); }
  int run_without_offload() override { return drive(nullptr); }
  fault_outcome outcome(const embed::scheduler_connector& sc, uint64_t seed) const override {
    return report_ ? sim::fault_outcome_of(*report_, seed) : scheduler_outcome(sc, seed);
  }

 private:
  /// The run over `sc` (null: offloading off).
  int drive(embed::scheduler_connector* sc);

  const scheduler_process_options& o_;
  engine_io io_;
  std::unique_ptr<sim::executor_publisher> executor_;
  std::optional<sim::run_report> report_;
};

int sim_scheduler::drive(embed::scheduler_connector* sc) {
  const launch_config& c = o_.config->config;
  signal_watcher& signals = io_.signals;
  const milliseconds ready = ready_wait(o_);
  if (auto st = sc ? sc->wait_for_workers(ready) : status::success(); !st) {
    spdlog::error("sim: not every rank registered within {} ms: {}", ready.count(), st.to_string());
    return 1;
  }
  if (auto st = executor_->wait_for_subscribers(o_.topology.world_size(), ready); !st) {
    spdlog::error("sim: {}", st.to_string());
    return 1;
  }
  io_.emit(ready_event{o_.topology.world_size()});
  sim::loop_options lo;
  lo.step_timeout = milliseconds{o_.step_timeout_ms};
  lo.offloaded_block_bytes = o_.config->plan.kv.slot_bytes * o_.config->plan.kv.world_size;
  // A lost rank (under on-failure): no step until every rank registered again and the new
  // process subscribed to the executor channel (subscriptions count since its creation).
  // Without a connector no rank change is ever seen: the loop never calls it.
  std::set<std::pair<rank_id, uint32_t>> told;
  lo.await_ranks = [&]() -> status {
    spdlog::warn("sim: a rank was lost: pausing until every rank is back");
    report_lost_ranks(*sc, io_, told);
    if (auto st = wait_for_restarts(*sc, o_, signals); !st) return st;
    if (int sig = signals.signalled()) {
      return make_error(errc::io_error, "signal " + std::to_string(sig));
    }
    const uint64_t subscribers = o_.topology.world_size() + sc->ranks_changed().restarts;
    if (auto st = executor_->wait_for_subscribers(static_cast<uint32_t>(subscribers), ready); !st) {
      return st;
    }
    spdlog::info("sim: every rank is back; the GPU prefix cache is reset");
    return status::success();
  };
  lo.connector_clock_ns = thread_cpu_ns;  // waiting for the ranks' reports is not counted
  lo.run_model = [&](const sim::model_input& in) -> result<double> {
    if (int sig = signals.signalled()) {
      return make_error(errc::io_error, "signal " + std::to_string(sig));
    }
    if (auto st = executor_->publish({false, in}); !st) return st;
    return 0.0;  // the ranks' connector time is theirs, not measured here
  };
  lo.on_step = [&](const sim::run_report& r) {
    if (sc) report_lost_ranks(*sc, io_, told);
    io_.emit(progress_event{
        r.steps,
        {{"event", "progress"},
         {"step", r.steps},
         {"steps", c.workload.steps},
         {"requests_finished", r.requests_finished},
         {"requests_running", r.requests_arrived - r.requests_finished - r.requests_aborted},
         {"prefill_tokens_computed", r.prefill_tokens_computed},
         {"cpu_hit_tokens", r.cpu_hit_tokens},
         {"gpu_hit_tokens", r.gpu_hit_tokens},
         {"jobs_failed", r.jobs_failed}}});
  };
  auto rep = sim::run_engine_loop(c, sc, lo);
  if (sc) {
    rep.busy_slots = sc->planner().manager().busy();
    const embed::fault_stats f = sc->fault_statistics();
    rep.faults_fired = f.injected;  // the channel's; the launcher adds the workers' copy faults
    rep.late_reports_dropped = f.late_reports;
    rep.duplicates_dropped = f.duplicates;
  }
  io_.emit(finished_event{sim::finished_json(rep.finished)});  // what `launch --compare` pairs
  io_.emit(sim_event{sim::summary_json(rep)});  // the launcher adds the workers' checks
  if (auto st = executor_->publish({true, {}}); !st) spdlog::warn("sim: {}", st.to_string());
  report_ = rep;
  return rep.ok() ? 0 : 1;
}

}  // namespace

int scheduler_engine::run_without_offload() {
  spdlog::error("scheduler: this engine needs offloading (offload.enabled true)");
  return 2;
}

fault_outcome scheduler_outcome(const embed::scheduler_connector& sc, uint64_t seed) {
  const embed::fault_stats f = sc.fault_statistics();
  fault_outcome o;
  o.seed = seed;
  o.fired = f.injected;
  o.jobs_failed = sc.stats().loads_failed + sc.stats().stores_failed;
  o.late_reports_dropped = f.late_reports;
  o.duplicates_dropped = f.duplicates;
  o.pending_jobs = sc.jobs_in_flight();
  return o;
}

result<std::unique_ptr<scheduler_engine>> make_scheduler_engine(engine_kind kind,
                                                                const scheduler_process_options& o,
                                                                const pool_plan& plan,
                                                                engine_io io) {
  if (auto p =
          offload_problem(traits_of(kind), o.offload, !o.faults.specs.empty(), o.rank_restarts);
      !p.empty()) {
    return make_error(errc::invalid_argument, p);
  }
  switch (kind) {
    case engine_kind::smoke: {
      auto s = smoke_engine::create(plan.geometry.world_size, o.pool.slots, o.pool.kv,
                                    {.rank_restarts = o.rank_restarts, .rank_nodes = o.rank_nodes});
      if (!s) return s.error();
      return std::unique_ptr<scheduler_engine>(
          std::make_unique<smoke_scheduler>(std::move(s).value(), o, std::move(io)));
    }
    case engine_kind::sim:
      if (!o.config) {
        return make_error(errc::invalid_argument,
                          "the simulated engine needs its config (--config with --engine sim)");
      }
      return std::unique_ptr<scheduler_engine>(std::make_unique<sim_scheduler>(o, std::move(io)));
    case engine_kind::serve:
      break;
  }
  return std::unique_ptr<scheduler_engine>(std::make_unique<serve_scheduler>(o, std::move(io)));
}

result<std::unique_ptr<scheduler_engine>> make_scheduler_engine(std::string_view name,
                                                                const scheduler_process_options& o,
                                                                const pool_plan& plan,
                                                                engine_io io) {
  auto kind = parse_engine_kind(name);
  if (!kind) return kind.error();
  return make_scheduler_engine(*kind, o, plan, std::move(io));
}

}  // namespace kvc::launch
