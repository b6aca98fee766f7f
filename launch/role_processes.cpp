// The bodies of `kvconnect scheduler` and `kvconnect worker`: command-line wrappers around the
// embedding API (scheduler_connector, worker_connector), so a process started by the CLI runs
// the code path an engine links. Each prints JSON lines on stdout (what a launcher or a test
// reads: "listening" with the port, "registered", "ready", "smoke", "stopped") and logs to
// stderr. The scheduler's connector creates the node's pool and removes it when it shuts down.
#include "launch/role_options.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "launch/signal_watcher.hpp"
#include "launch/smoke_engine.hpp"

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
void emit(const nlohmann::json& line) {
  static bool reported = false;
  std::cout << line.dump() << std::endl;
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

/// Smoke mode: waits for every rank, then runs the engine loop's steps one after the other.
int smoke(embed::scheduler_connector& sc, smoke_engine& engine, const scheduler_process_options& o,
          signal_watcher& signals) {
  if (auto st = sc.wait_for_workers(milliseconds{o.ready_timeout_ms}); !st) {
    spdlog::error("smoke: not every rank registered within {} ms: {}", o.ready_timeout_ms,
                  st.to_string());
    return 1;
  }
  emit({{"event", "ready"}, {"world_size", o.topology.world_size()}});
  for (uint64_t k = 0; k < o.smoke_steps; ++k) {
    if (signals.signalled()) return 1;
    if (auto st = engine.run_step(sc, k, milliseconds{o.step_timeout_ms}); !st) {
      spdlog::error("{}", st.to_string());
      return 1;
    }
  }
  emit({{"event", "smoke"},
        {"steps", o.smoke_steps},
        {"jobs_ok", engine.jobs_ok()},
        {"slots_checked", engine.slots_checked()},
        {"bytes", engine.bytes_moved()}});
  return 0;
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
    auto step = wc.bind_next_connector_metadata(idle_slice);
    if (!step) {
      if (step.error().code() == errc::timeout) continue;
      return step.error();
    }
    // No forward pass, no compute stream: the copies depend on nothing (cuda::submit_options).
    const cuda::submit_options no_compute{.no_dependency = true};
    status first = wc.handle_preemptions(no_compute);
    if (auto st = wc.start_load_kv(no_compute); first && !st) first = st;
    if (auto st = wc.wait_for_save(); first && !st) first = st;
    if (auto st = wc.finish_transfers(no_compute); first && !st) first = st;
    // No engine tells this worker which requests finished: the metadata does.
    wc.get_finished(wc.metadata()->finished_requests);
    wc.get_block_ids_with_load_errors();  // the job results say which loads failed
    wc.clear_connector_metadata();
    if (!first) spdlog::error("worker {}: step {}: {}", wc.rank(), *step, first.to_string());
  }
  return status::success();
}

}  // namespace

int run_scheduler_process(const scheduler_process_options& o) {
  use_stderr_logging("scheduler");
  auto plan = derive_pool(o.topology, o.pool);
  if (!plan) return fail("scheduler", 1, plan.error().to_string());
  std::optional<smoke_engine> engine;
  if (o.smoke_steps > 0) {
    auto s = smoke_engine::create(plan->geometry.world_size, o.pool.slots, o.pool.kv);
    if (!s) return fail("scheduler", 1, s.error().to_string());
    engine.emplace(std::move(s).value());
  }
  signal_watcher signals;  // before any thread starts
  embed::scheduler_connector_config cfg;
  cfg.network = o.network.facade(o.host, o.port);
  cfg.token = o.token;
  cfg.topology = o.topology;
  cfg.pool = pool_of(o.pool, o.prefault);
  cfg.planner.gpu_block_size = smoke_engine::gpu_block_size;
  cfg.planner.offloaded_block_size = o.pool.kv.block_factor * smoke_engine::gpu_block_size;
  cfg.job_timeout = milliseconds{o.job_timeout_ms};
  cfg.observe = o.trace.observe();
  auto sc = embed::scheduler_connector::create(cfg);
  if (!sc) return fail("scheduler", 1, "cannot start: " + sc.error().to_string());
  // A second signal exits at once; the pool's name must not outlive the process.
  signals.on_second_signal([name = plan->segment] { ::shm_unlink(name.c_str()); });
  emit({{"event", "listening"},
        {"port", (*sc)->port()},
        {"segment", plan->segment},
        {"layout_checksum", plan->layout_checksum},
        {"world_size", plan->geometry.world_size},
        {"pid", ::getpid()}});
  spdlog::info(
      "scheduler: listening on {}:{} for {} ranks; segment {} ({} slots of {} "
      "bytes per rank)",
      o.host, (*sc)->port(), plan->geometry.world_size, plan->segment, plan->geometry.num_slots,
      plan->geometry.slot_bytes);
  const int code = engine ? smoke(**sc, *engine, o, signals) : serve(**sc, signals);
  if (int sig = signals.signalled()) spdlog::info("scheduler: signal {}: shutting down", sig);
  auto stopped = (*sc)->shutdown(milliseconds{o.stop_timeout_ms});
  if (!stopped) {
    spdlog::error("scheduler: stopping the workers: {}", stopped.error().to_string());
    return 1;  // the pool is removed anyway; the run did not end cleanly
  }
  emit({{"event", "stopped"}, {"workers", *stopped}});
  return code;
}

int run_worker_process(const worker_process_options& o) {
  const std::string who = "worker";
  use_stderr_logging("worker " + std::to_string(o.rank));
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
  cfg.observe = o.trace.observe();
  auto wc = embed::worker_connector::create(cfg);
  if (!wc) {
    const errc code = wc.error().code();
    const bool unreachable = code == errc::io_error || code == errc::timeout;
    return unreachable && wc.error().message().find("cannot reach") != std::string::npos
               ? fail(who, 1, rank + wc.error().to_string())
               : fail(who, 2, rank + "registration failed: " + wc.error().to_string());
  }
  if (auto st = install_synthetic_kv(**wc, o.pool.kv); !st) {
    return fail(who, 2, rank + "set-up failed: " + st.to_string());
  }
  spdlog::info("worker: registered as rank {} (incarnation {})", o.rank, o.incarnation);
  emit({{"event", "registered"},
        {"rank", o.rank},
        {"incarnation", o.incarnation},
        {"pid", ::getpid()}});
  const status st = run_steps(**wc, signals);
  if (!signals.signalled() && !(*wc)->stopped()) {
    return fail(who, 1, rank + "stopped: " + st.to_string());
  }
  emit({{"event", "stopped"}, {"rank", o.rank}});
  return 0;
}

}  // namespace kvc::launch
