// The bodies of `kvconnect scheduler` and `kvconnect worker`: command-line wrappers around the
// embedding API (scheduler_connector, worker_connector), so a process started by the CLI runs
// the code path an engine links. Each prints JSON lines on stdout (what a launcher or a test
// reads: "listening" with the port, "registered", "ready", "smoke", "stopped") and logs to
// stderr. The scheduler's connector creates the node's pool and removes it when it shuts down.
#include "launch/cli/role_processes.hpp"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/fault_report.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/engines/sim/engine_loop.hpp"
#include "launch/engines/sim/executor_channel.hpp"
#include "launch/engines/sim/model_runner.hpp"
#include "launch/engines/sim/run_comparison.hpp"
#include "launch/engines/smoke/smoke_engine.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/roles/child_events.hpp"

namespace kvc::launch {

namespace {

using std::chrono::milliseconds;

/// How often the worker's loop looks at signals while no step arrives.
constexpr milliseconds idle_slice{100};

void use_stderr_logging(const std::string& role) {
  auto logger =
      std::make_shared<spdlog::logger>("kvc", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [" + role + "] [%l] %v");
  spdlog::set_default_logger(std::move(logger));
  spdlog::cfg::load_env_levels();  // $SPDLOG_LEVEL: kvconnect launch passes runtime.log_level
}

/// One machine-readable line on stdout, flushed (readers wait for it). A reader that went away
/// is logged once; the process goes on (SIGPIPE is ignored, see main.cpp).
void emit(const child_event& event) {
  static bool reported = false;
  std::cout << to_line(event) << std::endl;
  if (!std::cout && !reported) {
    reported = true;
    spdlog::warn("stdout is gone (its reader closed it): JSON lines are dropped from here on");
  }
  std::cout.clear();
}

/// A rank's connector time of each step, to the launcher as the run goes:
/// {"event":"connector_steps","rank":r,"ns":[[step,ns],...]} every `batch` steps and the rest
/// before the "runner" line (the launcher folds them: launch::slowest_rank_sum). The worker's
/// memory and every line stay bounded however long the run.
class connector_steps_out {
 public:
  static constexpr size_t batch = 1024;
  explicit connector_steps_out(rank_id rank) : rank_(rank) { steps_.reserve(batch); }
  void add(step_id step, uint64_t ns) {
    steps_.emplace_back(step, ns);
    if (steps_.size() >= batch) flush();
  }
  void flush() {
    if (steps_.empty()) return;
    emit(connector_steps_event{rank_, steps_});
    steps_.clear();
  }

 private:
  rank_id rank_;
  std::vector<std::pair<step_id, uint64_t>> steps_;
};

int fail(const std::string& who, int code, const std::string& message) {
  std::cerr << "kvconnect " << who << ": " << message << std::endl;
  return code;
}

embed::pool_config pool_of(const pool_options& p, bool prefault) {
  return {.instance = p.instance,
          .slots_per_rank = p.slots,
          .slot_bytes = p.kv.slot_bytes(),
          .prefault = prefault};
}

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
void report_lost_ranks(const embed::scheduler_connector& sc,
                       std::set<std::pair<rank_id, uint32_t>>& told) {
  for (const embed::lost_rank& l : sc.lost_ranks()) {
    if (!told.insert({l.rank, l.incarnation}).second) continue;
    emit(rank_lost_event{l.rank, l.incarnation});
  }
}

/// Smoke mode: waits for every rank, then runs the engine loop's steps one after the other.
int smoke(embed::scheduler_connector& sc, smoke_engine& engine, const scheduler_process_options& o,
          signal_watcher& signals) {
  if (auto st = sc.wait_for_workers(ready_wait(o)); !st) {
    spdlog::error("smoke: not every rank registered within {} ms: {}", ready_wait(o).count(),
                  st.to_string());
    return 1;
  }
  emit(ready_event{o.topology.world_size()});
  std::set<std::pair<rank_id, uint32_t>> told;
  for (uint64_t k = 0; k < o.smoke_steps; ++k) {
    if (signals.signalled()) return 1;
    report_lost_ranks(sc, told);
    if (engine.needs_workers()) {  // a rank was lost: its restart registers again
      if (auto st = wait_for_restarts(sc, o, signals); !st) {
        spdlog::error("{}", st.to_string());
        return 1;
      }
      if (signals.signalled()) return 1;
      engine.workers_back();
      spdlog::info("smoke: every rank is registered again (step {})", k + 1);
    }
    if (auto st = engine.run_step(sc, k, milliseconds{o.step_timeout_ms}); !st) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
    emit(progress_event{k + 1,
                        {{"event", "progress"},
                         {"step", k + 1},
                         {"steps", o.smoke_steps},
                         {"jobs_ok", engine.jobs_ok()},
                         {"jobs_failed", engine.jobs_failed()}}});
  }
  emit(smoke_event{.steps = o.smoke_steps,
                   .jobs_ok = engine.jobs_ok(),
                   .jobs_failed = engine.jobs_failed(),
                   .rounds_interrupted = engine.rounds_interrupted(),
                   .slots_checked = engine.slots_checked(),
                   .bytes = engine.bytes_moved()});
  return 0;
}

/// CPU time of the calling thread, ns.
double thread_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// The simulated engine's scheduler loop: waits for every rank and its executor-channel
/// subscription, runs the workload (each step's model input published to the workers), ends
/// the channel and prints its finished requests ("finished", for `launch --compare`) and the
/// run's figures ("sim"), kept in `report` once the run started (the fault report's source
/// too). 0 when the scheduler side saw no problem (nothing hung, pending or leaked); the
/// workers report their load checks themselves.
int simulate(embed::scheduler_connector& sc, const launch_config& c,
             sim::executor_publisher& executor, const scheduler_process_options& o,
             uint64_t offloaded_block_bytes, signal_watcher& signals,
             std::optional<sim::run_report>& report) {
  const milliseconds ready = ready_wait(o);
  if (auto st = sc.wait_for_workers(ready); !st) {
    spdlog::error("sim: not every rank registered within {} ms: {}", ready.count(),
                  st.to_string());
    return 1;
  }
  if (auto st = executor.wait_for_subscribers(o.topology.world_size(), ready); !st) {
    spdlog::error("sim: {}", st.to_string());
    return 1;
  }
  emit(ready_event{o.topology.world_size()});
  sim::loop_options lo;
  lo.step_timeout = milliseconds{o.step_timeout_ms};
  lo.offloaded_block_bytes = offloaded_block_bytes;
  // A lost rank (under on-failure): no step until every rank registered again and the new
  // process subscribed to the executor channel (subscriptions count since its creation).
  std::set<std::pair<rank_id, uint32_t>> told;
  lo.await_ranks = [&]() -> status {
    spdlog::warn("sim: a rank was lost: pausing until every rank is back");
    report_lost_ranks(sc, told);
    if (auto st = wait_for_restarts(sc, o, signals); !st) return st;
    if (int sig = signals.signalled()) {
      return make_error(errc::io_error, "signal " + std::to_string(sig));
    }
    const uint64_t subscribers = o.topology.world_size() + sc.ranks_changed().restarts;
    if (auto st = executor.wait_for_subscribers(static_cast<uint32_t>(subscribers), ready); !st) {
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
    if (auto st = executor.publish({false, in}); !st) return st;
    return 0.0;  // the ranks' connector time is theirs, not measured here
  };
  lo.on_step = [&](const sim::run_report& r) {
    report_lost_ranks(sc, told);
    emit(progress_event{r.steps,
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
  auto rep = sim::run_engine_loop(c, &sc, lo);
  if (auto st = executor.publish({true, {}}); !st) spdlog::warn("sim: {}", st.to_string());
  rep.busy_slots = sc.planner().manager().busy();
  const embed::fault_stats f = sc.fault_statistics();
  rep.faults_fired = f.injected;  // the channel's; the launcher adds the workers' copy faults
  rep.late_reports_dropped = f.late_reports;
  rep.duplicates_dropped = f.duplicates;
  emit(finished_event{sim::finished_json(rep.finished)});  // what `launch --compare` pairs
  emit(sim_event{sim::summary_json(rep)});  // the launcher adds the workers' checks, prints it
  report = rep;
  return rep.ok() ? 0 : 1;
}

/// Without an engine loop: the coordinator still takes what arrives (rank arrivals and
/// departures), as an idle engine's scheduler loop would, until a signal.
int serve(embed::scheduler_connector& sc, signal_watcher& signals) {
  while (signals.wait_for(idle_slice) == 0) {
    if (auto up = sc.update_connector_output(); !up) {
      spdlog::error("scheduler: {}", up.error().to_string());
      return 1;
    }
  }
  return 0;
}

/// The worker's engine loop: every step's calls in vLLM's order, the transfers finished
/// before the report (no forward pass to overlap them with).
status run_steps(embed::worker_connector& wc, signal_watcher& signals) {
  while (!signals.signalled()) {
    auto step = wc.next_metadata_step(idle_slice);
    if (!step) {
      if (step.error().code() == errc::timeout) continue;
      return step.error();
    }
    // No forward pass, no compute stream: the copies depend on nothing (cuda::submit_options).
    // No engine tells this worker which requests finished: the metadata does (finished_ids
    // null); the job results say which loads failed.
    const cuda::submit_options no_compute{.no_dependency = true};
    const auto out = embed::run_worker_step(
        wc, *step, idle_slice,
        {.submit = no_compute, .after_save = [&] { return wc.finish_transfers(no_compute); }});
    if (!out.bound) {
      if (out.first_error.code() == errc::timeout) continue;
      return out.first_error;
    }
    if (!out.first_error) {
      spdlog::error("worker {}: step {}: {}", wc.rank(), *step, out.first_error.to_string());
    }
    if (auto health = wc.device_health(); !health) return health;  // the step was reported
  }
  return status::success();
}

/// The simulated engine's model on this rank: each step's model input from the executor
/// channel, run through the model runner, until the channel's end, the scheduler's going or a
/// signal.
status run_model(embed::worker_connector& wc, sim::model_runner& runner,
                 sim::executor_subscriber& executor, signal_watcher& signals) {
  constexpr std::chrono::seconds bind_timeout{30};
  while (!signals.signalled()) {
    auto m = executor.receive(idle_slice);
    if (!m) return m.error();
    if (!m->has_value()) {
      if (!wc.connected()) return status::success();
      continue;
    }
    if ((*m)->end) return status::success();
    if (auto st = runner.run_step((*m)->input, bind_timeout); !st) {
      spdlog::error("worker {}: step {}: {}", wc.rank(), (*m)->input.step, st.to_string());
    }
    if (auto health = wc.device_health(); !health) return health;  // the step was reported
  }
  return status::success();
}

/// `kvconnect worker`'s exit code when its device became unusable (docs/protocol.md).
constexpr int device_lost_exit_code = 4;

/// The copy and file tier faults a worker injected, for its last line (the launcher adds them
/// up).
fired_faults fired_copy_faults(const fault_counts& fired) {
  fired_faults out;
  for (fault_kind k : {fault_kind::fail_copy, fault_kind::delay_copy, fault_kind::lose_device,
                       fault_kind::fail_io}) {
    out[std::string{to_string(k)}] = fired[static_cast<size_t>(k)];
  }
  return out;
}

/// The device cannot take work any more (a sticky CUDA error, an injected lose_device): only a
/// new process gets a new CUDA context, so the worker ends and the launcher restarts the rank.
int device_lost(const worker_process_options& o, const embed::worker_connector& wc,
                const status& why) {
  spdlog::error("worker rank {}: {}: exiting so that the rank restarts", o.rank, why.to_string());
  emit(device_lost_event{o.rank, o.incarnation, why.message(),
                         fired_copy_faults(wc.injected_faults())});
  return device_lost_exit_code;
}

}  // namespace

/// The fault report of the scheduler's end without the simulated engine (the smoke run, which
/// fails on any hung request, leak or byte mismatch itself; serving): the channel faults it
/// injected and what the coordinator counted; the planner's in-flight jobs are the pending ones.
/// With the simulated engine the report is its run report's (sim::fault_outcome_of).
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

int run_scheduler_process(const scheduler_process_options& o) {
  use_stderr_logging("scheduler");
  auto faults = parse_fault_options(o.faults.specs, o.faults.seed);
  if (!faults) return fail("scheduler", 2, faults.error().message());
  if (o.smoke_steps > 0 || o.sim_engine) {  // an engine that waits for steps
    if (auto p = step_wait_problem(o.step_timeout_ms, o.job_timeout_ms, "--step-timeout-ms",
                                   "--job-timeout-ms", false);
        !p.empty()) {
      return fail("scheduler", 2, p);
    }
  }
  auto plan = derive_pool(o.topology, o.pool);
  if (!plan) return fail("scheduler", 1, plan.error().to_string());
  std::optional<smoke_engine> engine;
  if (o.smoke_steps > 0) {
    auto s = smoke_engine::create(plan->geometry.world_size, o.pool.slots, o.pool.kv,
                                  {.rank_restarts = o.rank_restarts, .rank_nodes = o.rank_nodes});
    if (!s) return fail("scheduler", 1, s.error().to_string());
    engine.emplace(std::move(s).value());
  }
  signal_watcher signals;  // before any thread starts
  embed::scheduler_connector_config cfg;
  cfg.network = o.network.facade(o.host, o.port);
  cfg.token = o.token;
  cfg.topology = o.topology;
  for (uint32_t n : o.rank_nodes) cfg.nodes = std::max(cfg.nodes, n + 1);
  cfg.pool = pool_of(o.pool, o.prefault);
  cfg.planner.gpu_block_size = smoke_engine::gpu_block_size;
  cfg.planner.offloaded_block_size = o.pool.kv.block_factor * smoke_engine::gpu_block_size;
  if (o.sim_engine) cfg.planner = o.sim_engine->plan.scheduler.planner;  // block sizes, policy
  cfg.file_tier = o.pool.tier.config();
  cfg.job_timeout = milliseconds{o.job_timeout_ms};
  cfg.observe.serve_metrics = o.metrics_port != 0;
  cfg.observe.metrics_port = o.metrics_port;
  cfg.observe.kv_events_endpoint = o.kv_events_endpoint;
  cfg.observe.kv_events_replay_endpoint = o.kv_events_replay_endpoint;
  cfg.observe.kv_events_topic = o.kv_events_topic;
  cfg.job_timeout_steps = o.job_timeout_steps;
  cfg.faults = faults_at(*faults, fault_site::channel);
  const embed::observe_config trace = o.trace.observe();
  cfg.observe.trace = trace.trace;
  cfg.observe.trace_dir = trace.trace_dir;
  cfg.observe.record = !o.record_dir.empty();
  cfg.observe.record_dir = o.record_dir;
  auto sc = embed::scheduler_connector::create(cfg);
  if (!sc) return fail("scheduler", 1, "cannot start: " + sc.error().to_string());
  std::unique_ptr<sim::executor_publisher> executor;
  if (o.sim_engine) {
    const uint16_t port = executor_port_of(o.sim_engine->config.runtime);
    auto p = sim::executor_publisher::create(o.host, port, o.token);
    if (!p) return fail("scheduler", 1, "cannot start: " + p.error().to_string());
    executor = std::move(p).value();
  }
  // A second signal exits at once; the pool's name must not outlive the process.
  signals.on_second_signal([name = plan->segment] { ::shm_unlink(name.c_str()); });
  emit(listening_event{.port = (*sc)->port(),
                       .segment = plan->segment,
                       .layout_checksum = plan->layout_checksum,
                       .world_size = plan->geometry.world_size,
                       .executor = executor ? executor->endpoint() : std::string{},
                       .pid = ::getpid(),
                       .metrics_port = (*sc)->metrics_port(),
                       .kv_events_endpoint = (*sc)->kv_events_endpoint(),
                       .kv_events_replay_endpoint = (*sc)->kv_events_replay_endpoint()});
  spdlog::info(
      "scheduler: listening on {}:{} for {} ranks; segment {} ({} slots of {} "
      "bytes per rank)",
      o.host, (*sc)->port(), plan->geometry.world_size, plan->segment, plan->geometry.num_slots,
      plan->geometry.slot_bytes);
  std::optional<sim::run_report> sim_report;
  const uint64_t offloaded_block_bytes =
      o.sim_engine ? o.sim_engine->plan.kv.slot_bytes * o.sim_engine->plan.kv.world_size : 0;
  int code = engine     ? smoke(**sc, *engine, o, signals)
             : executor ? simulate(**sc, o.sim_engine->config, *executor, o,
                                   offloaded_block_bytes, signals, sim_report)
                        : serve(**sc, signals);
  if (engine && code == 0 && o.serve_after_smoke) code = serve(**sc, signals);
  if (int sig = signals.signalled()) spdlog::info("scheduler: signal {}: shutting down", sig);
  auto stopped = (*sc)->shutdown(milliseconds{o.stop_timeout_ms});
  if (!stopped) {
    // The pool is removed anyway; the run did not end cleanly.
    spdlog::error("scheduler: stopping the workers: {}", stopped.error().to_string());
    code = 1;
  } else {
    emit(stopped_event{.workers = *stopped});
  }
  if (!faults->empty()) {  // the last line
    const fault_outcome outcome = sim_report ? sim::fault_outcome_of(*sim_report, faults->seed)
                                             : scheduler_outcome(**sc, faults->seed);
    emit(fault_report_event{outcome});
    code = fault_report_exit_code(outcome, code);
  }
  return code;
}

int run_worker_process(const worker_process_options& o) {
  const std::string who = "worker";
  use_stderr_logging("worker " + std::to_string(o.rank));
  auto faults = parse_fault_options(o.faults.specs, o.faults.seed);
  if (!faults) return fail(who, 2, faults.error().message());
  auto plan = derive_pool(o.topology, o.pool);
  const std::string rank = "rank " + std::to_string(o.rank) + ": ";
  if (!plan) return fail(who, 1, rank + plan.error().to_string());
  if (o.rank >= plan->geometry.world_size) {
    return fail(who, 1,
                rank + "--rank is outside the world of " +
                    std::to_string(plan->geometry.world_size) + " ranks");
  }
  if (o.port == 0) return fail(who, 1, rank + "--port must be > 0");
  signal_watcher signals;  // before any thread starts
  embed::worker_connector_config cfg;
  cfg.mode = embed::connection_mode::connect;
  cfg.network = o.network.facade(o.host, o.port);
  cfg.token = o.token;
  cfg.topology = o.topology;
  cfg.pool = pool_of(o.pool, o.prefault);
  cfg.rank = o.rank;
  cfg.incarnation = o.incarnation;
  cfg.backend = o.backend;
  cfg.device = o.device;
  cfg.block_size_factor = o.pool.kv.block_factor;
  cfg.register_timeout = milliseconds{o.register_timeout_ms};
  cfg.file_tier = o.pool.tier.config();
  cfg.faults = rank_faults(*faults);
  if (o.incarnation > 0) {
    // A lost device is lost once: the restarted process has a new one.
    std::erase_if(cfg.faults.specs,
                  [](const fault_spec& f) { return f.kind == fault_kind::lose_device; });
  }
  cfg.observe = o.trace.observe();
  // Everything that can fail here (copy engine, device, pool, the KV cache) comes before the
  // registration: a failed set-up must not use up the rank's incarnation.
  // prepare() reaches the scheduler (through its gate) but does not register yet.
  auto refused = [&](const status& st, bool registering) {
    const errc code = st.code();
    const bool unreachable = code == errc::io_error || code == errc::timeout;
    if (unreachable && st.message().find("cannot reach") != std::string::npos) {
      return fail(who, 1, rank + st.to_string());
    }
    return registering || code == errc::protocol_mismatch
               ? fail(who, 2, rank + "registration failed: " + st.to_string())
               : fail(who, 2, rank + "set-up failed: " + st.to_string());
  };
  auto wc = embed::worker_connector::prepare(cfg);
  if (!wc) return refused(wc.error(), false);
  std::optional<sim::model_runner> runner;
  connector_steps_out step_times(o.rank);
  std::unique_ptr<sim::executor_subscriber> executor;
  if (o.executor.empty()) {
    if (auto st = install_synthetic_kv(**wc, o.pool.kv); !st) {
      return fail(who, 2, rank + "set-up failed: " + st.to_string());
    }
  } else {
    const sim::runner_geometry g{.layers = o.pool.kv.layers,
                                 .page_bytes = o.pool.kv.page_bytes,
                                 .gpu_blocks = o.pool.kv.gpu_blocks,
                                 .gpu_block_size = o.gpu_block_size,
                                 .finish_transfers = true};
    auto r = sim::model_runner::create((*wc)->copy_engine(), wc->get(), o.rank, g);
    if (!r) return fail(who, 2, rank + "set-up failed: " + r.error().to_string());
    runner.emplace(std::move(r).value());
    runner->on_step_connector_ns([&](step_id s, uint64_t ns) { step_times.add(s, ns); });
    auto sub = sim::executor_subscriber::connect(o.executor, o.token);
    if (!sub) return fail(who, 2, rank + "set-up failed: " + sub.error().to_string());
    executor = std::move(sub).value();
  }
  if (auto st = (*wc)->register_with_scheduler(); !st) return refused(st, true);
  spdlog::info("worker: registered as rank {} (incarnation {})", o.rank, o.incarnation);
  emit(registered_event{o.rank, o.incarnation, ::getpid()});
  if (runner) {
    if (auto st = run_model(**wc, *runner, *executor, signals); !st) {
      // Its runner line is not printed: like a killed rank's, its figures go with it.
      if (st.code() == errc::device_unavailable) return device_lost(o, **wc, st);
      spdlog::error("worker {}: {}", o.rank, st.to_string());
    }
    step_times.flush();
    const auto& s = runner->stats();
    emit(runner_event{.rank = o.rank,
                      .steps = s.steps,
                      .tokens_written = s.tokens_written,
                      .loads_verified = s.loads_verified,
                      .load_mismatches = s.load_mismatches,
                      .blocks_load_failed = s.blocks_load_failed,
                      .step_errors = s.step_errors,
                      .steps_connector_only = s.steps_connector_only,
                      .steps_skipped = s.steps_skipped,
                      .connector_ns = static_cast<uint64_t>(s.connector_ns),
                      .mismatches = s.mismatches});
  }
  const status st = run_steps(**wc, signals);
  if (st.code() == errc::device_unavailable) return device_lost(o, **wc, st);
  if (!signals.signalled() && !(*wc)->stopped()) {
    return fail(who, 1, rank + "stopped: " + st.to_string());
  }
  stopped_event stopped_line{.rank = o.rank};
  if (!faults->empty()) stopped_line.fired = fired_copy_faults((*wc)->injected_faults());
  emit(stopped_line);
  return 0;
}

}  // namespace kvc::launch
