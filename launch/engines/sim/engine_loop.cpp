#include "launch/engines/sim/engine_loop.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_set>

#include "launch/engines/sim/elapsed.hpp"
#include "launch/engines/sim/workload_generator.hpp"

namespace kvc::sim {

namespace {

/// The file tier's figures of the planner's counters (the bytes come from the job results).
tier_figures tier_figures_of(const scheduler::file_tier_counters& c) {
  return {.queries = c.ledger.queries,
          .hits = c.ledger.hits,
          .asked_again = c.asked_again,
          .cascaded_blocks = c.cascaded_blocks,
          .cascades_failed = c.ledger.cascades_failed,
          .cascades_skipped =
              c.ledger.cascades_skipped_queue_full + c.ledger.cascades_skipped_no_room,
          .promoted_blocks = c.promoted_blocks,
          .promotions_failed = c.ledger.promotions_failed,
          .evictions = c.ledger.evictions};
}

using clock = std::chrono::steady_clock;

using connector_clock = std::function<double()>;

/// What the loop offloads with, one call at a time: the scheduler_connector (connector_offload)
/// or nothing (no_offload: the run without offloading, `soak --compare`'s reference). The loop
/// never asks which it holds.
class offload_side {
 public:
  virtual ~offload_side() = default;
  /// Whether the run offloads (the report's `offload`).
  virtual bool offloads() const = 0;
  /// The engine's scheduler-side calls (lookups, allocations, finished requests).
  virtual connector_calls& calls() = 0;
  /// The connector time of every call so far, ns.
  virtual double connector_ns() const = 0;
  /// The ranks' losses and restarts so far; none without a connector.
  virtual embed::rank_changes ranks_changed() const = 0;
  virtual size_t jobs_in_flight() const = 0;
  /// build_connector_meta of the step's input.
  virtual status build(const scheduler::step_input& in) = 0;
  /// update_connector_output of `step` (waiting for it with o.await_output).
  virtual result<embed::connector_update> update(step_id step, const loop_options& o) = 0;
  /// take_events: the events are not the loop's; taking them keeps the connector's queue short.
  virtual void take_events() = 0;
  /// What the connector holds at the end: its pending jobs, the file tier's figures.
  virtual void finish(run_report& rep) const = 0;
};

class no_offload final : public offload_side {
 public:
  bool offloads() const override { return false; }
  connector_calls& calls() override { return none_; }
  double connector_ns() const override { return 0; }
  embed::rank_changes ranks_changed() const override { return {}; }
  size_t jobs_in_flight() const override { return 0; }
  status build(const scheduler::step_input&) override { return status::success(); }
  result<embed::connector_update> update(step_id, const loop_options&) override {
    return embed::connector_update{};
  }
  void take_events() override {}
  void finish(run_report&) const override {}

 private:
  no_connector none_;
};

/// The scheduler_connector: the core's connector_calls and the loop's, timing every call on
/// `now_ns`.
class connector_offload final : public offload_side, public connector_calls {
 public:
  connector_offload(embed::scheduler_connector& sc, connector_clock now_ns)
      : sc_(sc), now_ns_(std::move(now_ns)) {}
  bool offloads() const override { return true; }
  connector_calls& calls() override { return *this; }
  double connector_ns() const override { return ns; }
  embed::rank_changes ranks_changed() const override { return sc_.ranks_changed(); }
  size_t jobs_in_flight() const override { return sc_.jobs_in_flight(); }
  status build(const scheduler::step_input& in) override {
    const double t0 = now_ns_();
    auto meta = sc_.build_connector_meta(in);
    ns += now_ns_() - t0;
    if (!meta) return meta.error();
    return status::success();
  }
  result<embed::connector_update> update(step_id step, const loop_options& o) override {
    const double t0 = now_ns_();
    auto up = o.await_output ? sc_.update_connector_output(step, o.step_timeout)
                             : sc_.update_connector_output();
    ns += now_ns_() - t0;
    return up;
  }
  void take_events() override {
    const double t0 = now_ns_();
    (void)sc_.take_events();
    ns += now_ns_() - t0;
  }
  void finish(run_report& rep) const override {
    rep.pending_jobs = sc_.jobs_in_flight();
    if (sc_.planner().has_file_tier()) {
      rep.file_tier = tier_figures_of(sc_.planner().tier_counters());
    }
  }

  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed) override {
    const double t0 = now_ns_();
    auto m = sc_.get_num_new_matched_tokens(req, num_computed);
    ns += now_ns_() - t0;
    return m;
  }
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> blocks,
                                  uint32_t num_external) override {
    const double t0 = now_ns_();
    auto st = sc_.update_state_after_alloc(req, blocks, num_external);
    ns += now_ns_() - t0;
    return st;
  }
  bool request_finished(std::string_view id) override {
    const double t0 = now_ns_();
    const bool delay = sc_.request_finished(id);
    ns += now_ns_() - t0;
    return delay;
  }

 private:
  embed::scheduler_connector& sc_;
  connector_clock now_ns_;
  double ns = 0;  ///< every call's time; integral ns, so the sum does not depend on the order
};

/// The core's counts so far into the report.
void take_counts(const sim_scheduler& core, run_report& rep) {
  const auto& st = core.stats();
  rep.steps = core.step();
  rep.requests_arrived = st.requests_arrived;
  rep.requests_finished = st.requests_finished;
  rep.requests_aborted = st.requests_aborted;
  rep.preemptions = st.preemptions;
  rep.gpu_hit_tokens = st.gpu_hit_tokens;
  rep.cpu_hit_tokens = st.cpu_hit_tokens;
  rep.prefill_tokens_computed = st.prefill_tokens_computed;
  rep.prefill_tokens_saved = st.cpu_hit_tokens;
  rep.output_tokens = st.output_tokens;
  rep.hung_requests = core.unfinished();
  rep.requests_recomputed = st.requests_recomputed;
  rep.gpu_cache_resets = st.gpu_cache_resets;
}

}  // namespace

engine_limits limits_of(const launch::launch_config& c) {
  const auto& w = c.workload;
  return {.gpu_blocks = c.kv_cache.gpu_blocks,
          .gpu_block_size = c.kv_cache.gpu_block_size,
          .max_running = w.max_running,
          .max_batched_tokens = w.max_batched_tokens,
          .prefill_token_us = w.prefill_token_us,
          .decode_step_us = w.decode_step_us,
          .load_token_us = w.load_token_us,
          .enable_prefix_caching = c.kv_cache.enable_prefix_caching};
}

run_report run_engine_loop(const launch::launch_config& c, embed::scheduler_connector* sc,
                           const loop_options& o) {
  const engine_limits limits = limits_of(c);
  const connector_clock now_ns =
      o.connector_clock_ns ? o.connector_clock_ns : connector_clock([start = clock::now()] {
        return ns_since(start);
      });
  // The one place that looks at `sc`: the loop below holds an offload_side.
  const std::unique_ptr<offload_side> offload =
      sc ? std::unique_ptr<offload_side>(std::make_unique<connector_offload>(*sc, now_ns))
         : std::make_unique<no_offload>();
  sim_scheduler core(limits, offload->calls());
  const uint64_t room = uint64_t{limits.gpu_blocks - 1} * limits.gpu_block_size;
  workload_generator gen(c.workload, static_cast<uint32_t>(std::min<uint64_t>(room, UINT32_MAX)));

  run_report rep;
  rep.offload = offload->offloads();
  std::unordered_set<job_id> applied;  // every job result applied, to catch a second one
  const uint64_t block_bytes = o.offloaded_block_bytes;
  double connector_ns = 0;
  double store_seconds = 0;
  double load_seconds = 0;
  uint64_t tier_bytes_written = 0;  // the file tier's jobs' bytes, summed over the ranks
  uint64_t tier_bytes_read = 0;
  std::vector<double> step_us;
  auto problem = [&rep](std::string p) {
    if (rep.problems.size() < 20) rep.problems.push_back(std::move(p));
  };

  // A rank lost or restarted since the last step (or before the first: its new process's
  // subscription is awaited too): wait for every rank, then forget the GPU cache (the
  // restarted rank's KV is gone). False: the run ends.
  embed::rank_changes handled;
  auto ranks_back = [&]() -> bool {
    const embed::rank_changes now = offload->ranks_changed();
    if (now.losses == handled.losses && now.restarts == handled.restarts) return true;
    if (o.await_ranks) {
      if (auto st = o.await_ranks(); !st) {
        problem("step " + std::to_string(core.step() + 1) +
                ": a lost rank did not come back: " + st.to_string());
        return false;
      }
    }
    handled = offload->ranks_changed();
    if (auto st = core.lose_gpu_cache(); !st) {
      problem(st.to_string());
      return false;
    }
    return true;
  };

  const uint64_t arrivals_end = c.workload.steps;
  const uint64_t drain_end = arrivals_end + c.workload.drain_steps;
  const uint64_t last = drain_end + o.drain_limit;
  for (uint64_t s = 1; s <= last; ++s) {
    const auto t0 = clock::now();
    const bool draining = s > arrivals_end;
    if (!draining) {
      for (auto& spec : gen.arrivals(s)) {
        if (auto st = core.add(std::move(spec)); !st) problem(st.to_string());
      }
    } else if (s == drain_end + 1) {
      core.abort_all();  // the drain's bound: what is left will not finish
    }
    if (draining && core.idle() && offload->jobs_in_flight() == 0) break;
    if (!ranks_back()) break;
    core.schedule();
    const step_id step = core.step();
    if (auto st = offload->build(core.input()); !st) {
      problem("step " + std::to_string(step) + ": build_connector_meta: " + st.to_string());
      break;
    }
    auto ranks_ns = o.run_model(core.model());
    if (!ranks_ns) {
      problem("step " + std::to_string(step) + ": " + ranks_ns.error().to_string());
      break;
    }
    connector_ns += *ranks_ns;
    auto up = offload->update(step, o);
    if (!up) {
      problem("step " + std::to_string(step) +
              ": update_connector_output: " + up.error().to_string());
      break;
    }
    for (const auto& j : up->jobs) {
      if (!applied.insert(j.job).second) ++rep.double_completions;
      const bool load = j.kind == transfer_kind::load;
      if (!j.ok) {
        ++rep.jobs_failed;
        continue;
      }
      if (!is_gpu_transfer(j.kind)) {  // the file tier's: its own figures
        if (j.kind == transfer_kind::cascade) tier_bytes_written += j.bytes;
        if (j.kind == transfer_kind::promotion) tier_bytes_read += j.bytes;
        continue;
      }
      (load ? rep.bytes_loaded : rep.bytes_stored) += j.bytes;
      (load ? load_seconds : store_seconds) += j.seconds;
    }
    offload->take_events();
    for (auto& turn : core.complete(up->completions)) {
      if (draining) continue;
      if (auto next = gen.follow_up(turn.conversation, turn.turn, turn.tokens)) {
        if (auto st = core.add(std::move(*next)); !st) problem(st.to_string());
      }
    }
    step_us.push_back(ns_since(t0) / 1000.0);
    if (o.on_step) {
      take_counts(core, rep);  // the figures so far, for a progress line
      o.on_step(rep);
    }
  }

  const auto& st = core.stats();
  take_counts(core, rep);
  for (const auto& e : core.errors()) problem(e);
  connector_ns += offload->connector_ns();
  offload->finish(rep);
  if (rep.file_tier) {
    rep.file_tier->bytes_written = tier_bytes_written;
    rep.file_tier->bytes_read = tier_bytes_read;
  }
  // From the run's bytes, not job by job: a load that starts inside an offloaded block (after
  // GPU prefix-cache hits) moves part of it.
  rep.blocks_stored = block_bytes ? rep.bytes_stored / block_bytes : 0;
  rep.blocks_loaded = block_bytes ? rep.bytes_loaded / block_bytes : 0;
  rep.sim_seconds = st.clock_us / 1e6;
  rep.finished = st.finished;
  std::vector<double> ttft;
  ttft.reserve(st.finished.size());
  for (const auto& f : st.finished) ttft.push_back(f.ttft_us());
  rep.ttft_p50_ms = percentile(ttft, 50) / 1000.0;
  rep.ttft_p99_ms = percentile(ttft, 99) / 1000.0;
  rep.output_tokens_per_s = rep.sim_seconds > 0 ? rep.output_tokens / rep.sim_seconds : 0;
  rep.step_p50_us = percentile(step_us, 50);
  rep.step_p99_us = percentile(step_us, 99);
  rep.connector_ns = connector_ns;
  rep.connector_share = st.clock_us > 0 ? connector_ns / 1000.0 / st.clock_us : 0;
  rep.store_gbps = store_seconds > 0 ? rep.bytes_stored / store_seconds / 1e9 : 0;
  rep.load_gbps = load_seconds > 0 ? rep.bytes_loaded / load_seconds / 1e9 : 0;
  return rep;
}

}  // namespace kvc::sim
