#include "launch/engines/sim/in_process_run.hpp"

#include <chrono>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "cuda/manual_copy_engine.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/engines/sim/elapsed.hpp"
#include "launch/engines/sim/engine_loop.hpp"
#include "launch/engines/sim/model_runner.hpp"

namespace kvc::sim {

namespace {

using clock = std::chrono::steady_clock;

/// Everything of one run that lives as long as it.
struct rig {
  std::unique_ptr<embed::scheduler_connector> sc;
  std::vector<std::unique_ptr<embed::worker_connector>> workers;
  std::vector<std::unique_ptr<cuda::copy_engine>> own_engines;  ///< offload off only
  std::vector<model_runner> runners;
};

result<rig> build(const in_process_options& o, const launch::launch_plan& plan) {
  rig r;
  const rank_engine_factory factory =
      o.make_copy_engine ? o.make_copy_engine
                         : [](rank_id) -> result<std::unique_ptr<cuda::copy_engine>> {
    return std::unique_ptr<cuda::copy_engine>{new cuda::manual_copy_engine()};
  };
  const runner_geometry g{.layers = plan.kv.layers_per_rank,
                          .page_bytes = plan.kv.page_bytes,
                          .gpu_blocks = o.config.kv_cache.gpu_blocks,
                          .gpu_block_size = o.config.kv_cache.gpu_block_size,
                          .finish_transfers = o.finish_transfers};
  if (o.offload) {
    auto sc_cfg = plan.scheduler;
    sc_cfg.transport = embed::step_transport::memory;
    sc_cfg.listen = false;
    sc_cfg.wrap_transport = o.wrap_transport;
    sc_cfg.faults = faults_at(o.faults, fault_site::channel);
    sc_cfg.pool.prefault = true;  // page faults of the pool's first use stay out of the steps
    auto sc = embed::scheduler_connector::create(sc_cfg);
    if (!sc) return sc.error();
    r.sc = std::move(sc).value();
  }
  for (rank_id rank = 0; rank < plan.kv.world_size; ++rank) {
    cuda::copy_engine* engine = nullptr;
    embed::worker_connector* wc = nullptr;
    if (o.offload) {
      auto w_cfg = plan.workers[rank];
      w_cfg.mode = embed::connection_mode::in_process;
      w_cfg.pool.prefault = false;
      w_cfg.make_copy_engine = [factory, rank] { return factory(rank); };
      w_cfg.faults = rank_faults(o.faults);
      auto w = embed::worker_connector::create(w_cfg, r.sc.get());
      if (!w) return w.error();
      r.workers.push_back(std::move(w).value());
      wc = r.workers.back().get();
      engine = &wc->copy_engine();
    } else {
      auto e = factory(rank);
      if (!e) return e.error();
      r.own_engines.push_back(std::move(e).value());
      engine = r.own_engines.back().get();
    }
    auto runner = model_runner::create(*engine, wc, rank, g);
    if (!runner) return runner.error();
    r.runners.push_back(std::move(runner).value());
  }
  if (r.sc) {
    if (auto st = r.sc->wait_for_workers(o.step_timeout); !st) return st;
  }
  return r;
}

}  // namespace

result<run_report> run_in_process(const in_process_options& o) {
  const auto wall0 = clock::now();
  // The reference run without offloading has the same geometry.
  auto plan = launch::make_geometry_plan(o.config, o.instance, "in-process");
  if (!plan) return plan.error();
  auto built = build(o, *plan);
  if (!built) return built.error();
  rig& r = *built;

  loop_options lo;
  lo.drain_limit = o.drain_limit;
  lo.step_timeout = o.step_timeout;
  lo.await_output = false;  // the ranks run in this thread: their reports are in
  lo.offloaded_block_bytes = plan->kv.slot_bytes * plan->kv.world_size;
  lo.run_model = [&](const model_input& in) -> result<double> {
    double connector_ns = 0;
    for (auto& runner : r.runners) {
      const double before = runner.stats().connector_ns;
      (void)runner.run_step(in, o.step_timeout);  // counted in step_errors
      connector_ns += runner.stats().connector_ns - before;
    }
    return connector_ns;
  };
  run_report rep = run_engine_loop(o.config, r.sc.get(), lo);
  rep.offload = o.offload;
  double copy_ns = 0;
  for (const auto& runner : r.runners) copy_ns += runner.stats().copy_ns;
  rep.copy_share = rep.sim_seconds > 0 ? copy_ns / 1e9 / rep.sim_seconds : 0;
  for (const auto& runner : r.runners) {
    rep.loads_verified += runner.stats().loads_verified;
    rep.load_mismatches += runner.stats().load_mismatches;
    rep.step_errors += runner.stats().step_errors;
    for (const auto& m : runner.stats().mismatches) {
      if (rep.problems.size() < 20) rep.problems.push_back(m);
    }
  }
  if (r.sc) {
    for (const auto& w : r.workers) {
      rep.rank_jobs_known += w->jobs_known();
      const fault_counts copy = w->injected_faults();
      for (size_t k = 0; k < copy.size(); ++k) rep.faults_fired[k] += copy[k];
    }
    rep.busy_slots = r.sc->planner().manager().busy();
    const embed::fault_stats f = r.sc->fault_statistics();
    for (size_t k = 0; k < f.injected.size(); ++k) rep.faults_fired[k] += f.injected[k];
    rep.late_reports_dropped = f.late_reports;
    rep.duplicates_dropped = f.duplicates;
    (void)r.sc->shutdown(std::chrono::milliseconds{5000});
  }
  rep.wall_seconds = ns_since(wall0) / 1e9;
  return rep;
}

result<run_report> run_without_offload(in_process_options options) {
  options.offload = false;
  return run_in_process(options);
}

result<run_report> run_without_tier(in_process_options options) {
  options.config.offload.secondary_tiers.clear();
  return run_in_process(options);
}

}  // namespace kvc::sim
