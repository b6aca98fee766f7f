// The bodies of `kvconnect scheduler` and `kvconnect worker`: command-line wrappers around the
// embedding API (scheduler_connector, worker_connector), so a process started by the CLI runs
// the code path an engine links. Each sets up its facade and hands it to the engine it was
// started with (launch/engines/engine.hpp, made by name; neither branches on which). Each prints
// JSON lines on stdout (what a launcher or a test reads: "listening" with the port,
// "registered", "ready", "smoke", "stopped") and logs to stderr. The scheduler's connector
// creates the node's pool and removes it when it shuts down. With offload.enabled false neither
// role creates a connector (no pool, no registration): they call the engine's
// *_without_offload in its place, and refuse an engine that needs one (exit 2,
// offload_problem).
#include "launch/cli/role_processes.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <utility>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "launch/config/fault_options.hpp"
#include "launch/config/fault_report.hpp"
#include "launch/engines/engine.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/roles/child_events.hpp"
#include "launch/roles/engine_traits.hpp"

namespace kvc::launch {

namespace {

using std::chrono::milliseconds;

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

/// The scheduler connector's config of a process started with `o` over the pool `plan`, with
/// the engine's planner settings.
embed::scheduler_connector_config connector_config(const scheduler_process_options& o,
                                                   const pool_plan& plan,
                                                   const fault_config& faults,
                                                   const scheduler_engine& engine) {
  embed::scheduler_connector_config cfg;
  cfg.network = o.network.facade(o.host, o.port);
  cfg.token = o.token;
  cfg.topology = o.topology;
  for (uint32_t n : o.rank_nodes) cfg.nodes = std::max(cfg.nodes, n + 1);
  cfg.pool = pool_of(o.pool, o.prefault);
  engine.configure(cfg);  // the planner's block sizes and policy
  cfg.file_tier = o.pool.tier.config();
  cfg.job_timeout = milliseconds{o.job_timeout_ms};
  cfg.observe.serve_metrics = o.metrics_port != 0;
  cfg.observe.metrics_port = o.metrics_port;
  cfg.observe.kv_events_endpoint = o.kv_events_endpoint;
  cfg.observe.kv_events_replay_endpoint = o.kv_events_replay_endpoint;
  cfg.observe.kv_events_topic = o.kv_events_topic;
  cfg.job_timeout_steps = o.job_timeout_steps;
  cfg.faults = faults_at(faults, fault_site::channel);
  const embed::observe_config trace = o.trace.observe();
  cfg.observe.trace = trace.trace;
  cfg.observe.trace_dir = trace.trace_dir;
  cfg.observe.record = !o.record_dir.empty();
  cfg.observe.record_dir = o.record_dir;
  return cfg;
}

/// The "listening" line: the connector's port, segment and endpoints (none without one: port
/// 0, no segment), the engine's executor channel.
listening_event listening_of(const embed::scheduler_connector* sc, const pool_plan& plan,
                             const std::string& executor) {
  listening_event e{.world_size = plan.geometry.world_size, .executor = executor, .pid = ::getpid()};
  if (sc == nullptr) return e;
  e.port = sc->port();
  e.segment = plan.segment;
  e.layout_checksum = plan.layout_checksum;
  e.metrics_port = sc->metrics_port();
  e.kv_events_endpoint = sc->kv_events_endpoint();
  e.kv_events_replay_endpoint = sc->kv_events_replay_endpoint();
  return e;
}

/// The worker connector's config of a process started with `o` and its faults.
embed::worker_connector_config worker_config(const worker_process_options& o,
                                             const fault_config& faults) {
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
  cfg.faults = rank_faults(faults);
  if (o.incarnation > 0) {
    // A lost device is lost once: the restarted process has a new one.
    std::erase_if(cfg.faults.specs,
                  [](const fault_spec& f) { return f.kind == fault_kind::lose_device; });
  }
  cfg.observe = o.trace.observe();
  return cfg;
}

}  // namespace

int run_scheduler_process(const scheduler_process_options& o) {
  use_stderr_logging("scheduler");
  auto faults = parse_fault_options(o.faults.specs, o.faults.seed);
  if (!faults) return fail("scheduler", 2, faults.error().message());
  const engine_traits& traits = traits_of(o.engine);
  if (auto p = offload_problem(traits, o.offload, !faults->empty(), o.rank_restarts);
      !p.empty()) {
    return fail("scheduler", 2, p);
  }
  if (traits.waits_for_steps) {
    if (auto p = step_wait_problem(o.step_timeout_ms, o.job_timeout_ms, "--step-timeout-ms",
                                   "--job-timeout-ms", false);
        !p.empty()) {
      return fail("scheduler", 2, p);
    }
  }
  auto plan = derive_pool(o.topology, o.pool);
  if (!plan) return fail("scheduler", 1, plan.error().to_string());
  signal_watcher signals;  // before any thread starts
  auto engine = make_scheduler_engine(traits.kind, o, *plan, {signals, emit});
  if (!engine) return fail("scheduler", 1, engine.error().to_string());
  // The engine's offload side: the connector, which creates the node's pool; none with
  // offloading off.
  std::unique_ptr<embed::scheduler_connector> sc;
  if (o.offload) {
    auto created = embed::scheduler_connector::create(connector_config(o, *plan, *faults, **engine));
    if (!created) return fail("scheduler", 1, "cannot start: " + created.error().to_string());
    sc = std::move(created).value();
    // A second signal exits at once; the pool's name must not outlive the process.
    signals.on_second_signal([name = plan->segment] { ::shm_unlink(name.c_str()); });
  }
  auto executor = (*engine)->open();  // the simulated engine's executor channel
  if (!executor) return fail("scheduler", 1, "cannot start: " + executor.error().to_string());
  emit(listening_of(sc.get(), *plan, *executor));
  if (sc) {
    spdlog::info(
        "scheduler: listening on {}:{} for {} ranks; segment {} ({} slots of {} "
        "bytes per rank)",
        o.host, sc->port(), plan->geometry.world_size, plan->segment, plan->geometry.num_slots,
        plan->geometry.slot_bytes);
  } else {
    spdlog::info("scheduler: offloading off: no connector, no pool; {} ranks on {}",
                 plan->geometry.world_size, *executor);
  }
  int code = sc ? (*engine)->run(*sc) : (*engine)->run_without_offload();
  if (int sig = signals.signalled()) spdlog::info("scheduler: signal {}: shutting down", sig);
  if (!sc) return code;  // the ranks end with the engine's executor channel
  auto stopped = sc->shutdown(milliseconds{o.stop_timeout_ms});
  if (!stopped) {
    // The pool is removed anyway; the run did not end cleanly.
    spdlog::error("scheduler: stopping the workers: {}", stopped.error().to_string());
    code = 1;
  } else {
    emit(stopped_event{.workers = *stopped});
  }
  if (!faults->empty()) {  // the last line
    const fault_outcome outcome = (*engine)->outcome(*sc, faults->seed);
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
  const std::string rank = "rank " + std::to_string(o.rank) + ": ";
  if (auto p = offload_problem(traits_of(engine_of(o)), o.offload, !faults->empty());
      !p.empty()) {
    return fail(who, 2, rank + p);
  }
  auto plan = derive_pool(o.topology, o.pool);
  if (!plan) return fail(who, 1, rank + plan.error().to_string());
  if (o.rank >= plan->geometry.world_size) {
    return fail(who, 1,
                rank + "--rank is outside the world of " +
                    std::to_string(plan->geometry.world_size) + " ranks");
  }
  if (o.offload && o.port == 0) return fail(who, 1, rank + "--port must be > 0");
  signal_watcher signals;  // before any thread starts
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
  // The engine's offload side: the rank's connector; none with offloading off.
  std::unique_ptr<embed::worker_connector> wc;
  if (o.offload) {
    auto prepared = embed::worker_connector::prepare(worker_config(o, *faults));
    if (!prepared) return refused(prepared.error(), false);
    wc = std::move(prepared).value();
  }
  // After the connector: the engine (a model runner over it) goes first.
  const std::unique_ptr<rank_engine> engine = make_rank_engine(engine_of(o), o, {signals, emit});
  if (auto st = wc ? engine->prepare(*wc) : engine->prepare_without_offload(); !st) {
    return fail(who, 2, rank + "set-up failed: " + st.to_string());
  }
  if (wc) {
    if (auto st = wc->register_with_scheduler(); !st) return refused(st, true);
    spdlog::info("worker: registered as rank {} (incarnation {})", o.rank, o.incarnation);
    emit(registered_event{o.rank, o.incarnation, ::getpid()});
  }
  const status st = wc ? engine->run(*wc) : engine->run_without_offload();
  if (wc && st.code() == errc::device_unavailable) return device_lost(o, *wc, st);
  // With a connector the scheduler stops the rank; without, the engine's run ends it.
  const bool stopped = wc ? wc->stopped() : st.ok();
  if (!signals.signalled() && !stopped) return fail(who, 1, rank + "stopped: " + st.to_string());
  stopped_event stopped_line{.rank = o.rank};
  if (wc && !faults->empty()) stopped_line.fired = fired_copy_faults(wc->injected_faults());
  emit(stopped_line);
  return 0;
}

}  // namespace kvc::launch
