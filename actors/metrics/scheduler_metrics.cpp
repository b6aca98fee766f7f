#include "actors/metrics/scheduler_metrics.hpp"

#include <algorithm>
#include <cassert>

#include "actors/metrics/exposition.hpp"

namespace kvc::metrics {

namespace {

histogram must(std::vector<double> bounds) {
  auto h = histogram::create(std::move(bounds));
  assert(h.ok());
  return std::move(h).value();
}

/// Adds a family and its samples; the names and labels here are fixed and valid, so a failure
/// is a bug in this file (asserted in debug builds, the series is left out otherwise).
class builder {
 public:
  void family(std::string_view name, metric_type t, std::string_view help) {
    keep(x_.add_family(name, t, help));
  }
  void value(std::string_view name, const labels& l, double v) { keep(x_.add_value(name, l, v)); }
  void hist(std::string_view name, const labels& l, const histogram& h) {
    keep(x_.add_histogram(name, l, h));
  }
  std::string text() const { return x_.render(); }

 private:
  static void keep(const status& st) {
    assert(st.ok());
    (void)st;
  }
  exposition x_;
};

double d(uint64_t v) {
  return static_cast<double>(v);
}

}  // namespace

std::vector<double> transfer_size_bounds() {
  return {1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6};
}

std::vector<double> allocation_size_bounds() {
  return {1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144};
}

std::vector<double> round_trip_bounds() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 10};
}

scheduler_metrics::scheduler_metrics()
    : allocation_size_(must(allocation_size_bounds())), round_trip_(must(round_trip_bounds())) {
  load_.size = must(transfer_size_bounds());
  store_.size = must(transfer_size_bounds());
}

void scheduler_metrics::on_step_sent(const connector_metadata& meta, uint64_t now) {
  ++steps_sent_;
  for (const transfer_job& j : meta.stores) allocation_size_.observe(d(j.slots.size()));
  if (open_steps_.size() == max_open_steps) open_steps_.pop_front();
  open_steps_.emplace_back(meta.step, now);
}

void scheduler_metrics::on_output_applied(const connector_output& out, uint64_t now,
                                          std::span<const scheduler::settled_result> settled) {
  for (const job_result& r : out.jobs) {
    count_tier_job(r);
    const auto s = std::find_if(settled.begin(), settled.end(),
                                [&](const scheduler::settled_result& x) { return x.job == r.job; });
    const bool ok = s != settled.end() ? s->ok : r.ok;
    if (!ok) {
      // A failure's cause is the coordinator's; a load only the engine's sets failed has none.
      const auto code = static_cast<size_t>(r.error);
      if (!r.ok && code < errc_count) ++failures_by_error_[code];
      continue;
    }
    if (!is_gpu_transfer(r.kind)) continue;  // the file tier's jobs have their own metrics
    transfer_totals& t = r.kind == transfer_kind::load ? load_ : store_;
    t.bytes += r.bytes;
    t.seconds += r.seconds;
    t.size.observe(d(r.bytes));
  }
  while (!open_steps_.empty() && open_steps_.front().first <= out.step) {
    const uint64_t sent = open_steps_.front().second;
    round_trip_.observe(now >= sent ? d(now - sent) * 1e-9 : 0.0);
    ++steps_applied_;
    open_steps_.pop_front();
  }
}

void scheduler_metrics::count_tier_job(const job_result& r) {
  const bool read = r.kind == transfer_kind::promotion;
  if (!read && r.kind != transfer_kind::cascade) return;  // a check moves no KV
  if (!r.ok) {
    ++(read ? tier_jobs_.promotion_failures : tier_jobs_.cascade_failures);
    return;
  }
  (read ? tier_jobs_.read_bytes : tier_jobs_.write_bytes) += r.bytes;
  (read ? tier_jobs_.read_seconds : tier_jobs_.write_seconds) += r.seconds;
}

scheduler_sample scheduler_metrics::sample(const scheduler_sources& src) const {
  scheduler_sample s;
  if (src.planner != nullptr) s.planner = *src.planner;
  if (src.coordinator != nullptr) s.coordinator = *src.coordinator;
  s.stores_skipped = src.stores_skipped;
  s.pool_capacity = src.pool_capacity;
  s.pool_used = src.pool_used;
  s.jobs_in_flight = src.jobs_in_flight;
  s.world_size = src.world_size;
  s.ranks_alive = src.ranks_alive;
  s.frames_dropped = src.frames_dropped;
  s.faults_fired = src.faults_fired;
  s.load = load_;
  s.store = store_;
  s.allocation_size = allocation_size_;
  s.step_round_trip = round_trip_;
  s.steps_sent = steps_sent_;
  s.steps_applied = steps_applied_;
  s.failures_by_error = failures_by_error_;
  if (src.file_tier != nullptr) s.file_tier = *src.file_tier;
  s.tier_jobs = tier_jobs_;
  return s;
}

namespace {

/// vLLM's tiering series (vllm/v1/kv_offload/tiering, TieringOffloadingMetrics) that the file
/// tier's counters feed, then kvconnect's own about the tier.
void render_file_tier(builder& b, const scheduler::file_tier_counters& c,
                      const tier_job_totals& j) {
  using mt = metric_type;
  const labels t{{"tier", std::string{file_tier_label}}};
  auto counter = [&](std::string_view name, std::string_view help, double v) {
    b.family(name, mt::counter, help);
    b.value(name, t, v);
  };
  counter("vllm:kv_offload_tiering_read_bytes",
          "Bytes read from the tier into the CPU pool (promotions), summed over the ranks.",
          d(j.read_bytes));
  counter("vllm:kv_offload_tiering_read_time",
          "Seconds spent in promotions (the slowest rank's, summed over jobs).", j.read_seconds);
  counter("vllm:kv_offload_tiering_write_bytes",
          "Bytes written from the CPU pool to the tier (cascades), summed over the ranks.",
          d(j.write_bytes));
  counter("vllm:kv_offload_tiering_write_time",
          "Seconds spent in cascades (the slowest rank's, summed over jobs).", j.write_seconds);
  counter("vllm:kv_offload_tiering_promotion_job_failures", "Failed promotion jobs.",
          d(j.promotion_failures));
  counter("vllm:kv_offload_tiering_cascade_job_failures", "Failed cascade jobs.",
          d(j.cascade_failures));
  counter("vllm:kv_offload_tiering_block_queries", "Block lookups that consulted the tier.",
          d(c.ledger.queries));
  counter("vllm:kv_offload_tiering_block_hits", "Tier lookups answered hit.", d(c.ledger.hits));

  auto with = [&](std::string_view key, std::string_view value) {
    return labels{t[0], {std::string{key}, std::string{value}}};
  };
  b.family("kvconnect_tier_jobs_submitted", mt::counter, "File tier jobs planned, by kind.");
  b.value("kvconnect_tier_jobs_submitted", with("kind", "promotion"), d(c.promotion_jobs));
  b.value("kvconnect_tier_jobs_submitted", with("kind", "cascade"), d(c.cascade_jobs));
  b.value("kvconnect_tier_jobs_submitted", with("kind", "check"), d(c.check_jobs));
  b.family(
      "kvconnect_tier_cascades_skipped", mt::counter,
      "Blocks not cascaded, by reason (queue_full: back-pressure, no_room: nothing to evict).");
  b.value("kvconnect_tier_cascades_skipped", with("reason", "queue_full"),
          d(c.ledger.cascades_skipped_queue_full));
  b.value("kvconnect_tier_cascades_skipped", with("reason", "no_room"),
          d(c.ledger.cascades_skipped_no_room));
  counter("kvconnect_tier_promotions_no_room",
          "Tier hits the CPU pool had no room to promote (answered as misses), in blocks.",
          d(c.promotions_no_room));
  counter("kvconnect_tier_evictions", "Blocks evicted from the tier for capacity.",
          d(c.ledger.evictions));
  counter("kvconnect_tier_bad_files",
          "Blocks dropped because their file check found the file gone or bad.",
          d(c.ledger.dropped_bad_file));
}

}  // namespace

std::string render(const scheduler_sample& s) {
  using mt = metric_type;
  builder b;
  const labels g2c{{"transfer_type", "GPU_to_CPU"}};
  const labels c2g{{"transfer_type", "CPU_to_GPU"}};
  const labels none;
  const labels load{{"kind", "load"}};
  const labels store{{"kind", "store"}};

  // vLLM's offload series (R1 names, still emitted for the CPU spec by newer releases).
  b.family("vllm:kv_offload_total_bytes", mt::counter, "Bytes moved by offload transfers.");
  b.value("vllm:kv_offload_total_bytes", g2c, d(s.store.bytes));
  b.value("vllm:kv_offload_total_bytes", c2g, d(s.load.bytes));
  b.family("vllm:kv_offload_total_time", mt::counter, "Seconds spent in offload transfers.");
  b.value("vllm:kv_offload_total_time", g2c, s.store.seconds);
  b.value("vllm:kv_offload_total_time", c2g, s.load.seconds);
  b.family("vllm:kv_offload_size", mt::histogram, "Bytes of one offload transfer.");
  b.hist("vllm:kv_offload_size", g2c, s.store.size);
  b.hist("vllm:kv_offload_size", c2g, s.load.size);

  // vLLM's newer names.
  b.family("vllm:kv_offload_store_bytes", mt::counter, "Bytes stored GPU to CPU.");
  b.value("vllm:kv_offload_store_bytes", none, d(s.store.bytes));
  b.family("vllm:kv_offload_load_bytes", mt::counter, "Bytes loaded CPU to GPU.");
  b.value("vllm:kv_offload_load_bytes", none, d(s.load.bytes));
  b.family("vllm:kv_offload_store_time", mt::counter, "Seconds spent storing.");
  b.value("vllm:kv_offload_store_time", none, s.store.seconds);
  b.family("vllm:kv_offload_load_time", mt::counter, "Seconds spent loading.");
  b.value("vllm:kv_offload_load_time", none, s.load.seconds);
  b.family("vllm:kv_offload_store_size", mt::histogram, "Bytes of one store.");
  b.hist("vllm:kv_offload_store_size", none, s.store.size);
  b.family("vllm:kv_offload_load_size", mt::histogram, "Bytes of one load.");
  b.hist("vllm:kv_offload_load_size", none, s.load.size);
  b.family("vllm:kv_offload_allocation_failure", mt::counter,
           "Stores for which the CPU pool had no room (retried next step).");
  b.value("vllm:kv_offload_allocation_failure", none, d(s.planner.store_retries));
  b.family("vllm:kv_offload_cpu_cache_usage_perc", mt::gauge,
           "Share of CPU slots holding blocks (0-1).");
  b.value("vllm:kv_offload_cpu_cache_usage_perc", none,
          s.pool_capacity == 0 ? 0.0 : d(s.pool_used) / d(s.pool_capacity));
  b.family("vllm:kv_offload_cpu_allocation_size", mt::histogram, "Blocks per store allocation.");
  b.hist("vllm:kv_offload_cpu_allocation_size", none, s.allocation_size);
  b.family("vllm:kv_offload_stores_skipped", mt::counter,
           "Blocks the reuse filter kept out of the pool (store_threshold >= 2).");
  b.value("vllm:kv_offload_stores_skipped", none, d(s.stores_skipped));
  if (s.file_tier) render_file_tier(b, *s.file_tier, s.tier_jobs);

  // kvconnect's own.
  b.family("kvconnect_lookup_blocks", mt::counter, "Offloaded blocks looked up in the CPU pool.");
  b.value("kvconnect_lookup_blocks", none, d(s.planner.lookups));
  b.family("kvconnect_lookup_hit_blocks", mt::counter, "Lookups that found a ready block.");
  b.value("kvconnect_lookup_hit_blocks", none, d(s.planner.hit_blocks));
  b.family("kvconnect_cpu_pool_slots", mt::gauge, "CPU slots per rank.");
  b.value("kvconnect_cpu_pool_slots", none, d(s.pool_capacity));
  b.family("kvconnect_cpu_pool_used_slots", mt::gauge, "CPU slots holding or receiving a block.");
  b.value("kvconnect_cpu_pool_used_slots", none, d(s.pool_used));
  b.family("kvconnect_jobs_submitted", mt::counter, "Transfer jobs planned.");
  b.value("kvconnect_jobs_submitted", load, d(s.planner.loads_planned));
  b.value("kvconnect_jobs_submitted", store, d(s.planner.stores_planned));
  b.family("kvconnect_jobs_completed", mt::counter, "Transfer jobs that succeeded on every rank.");
  b.value("kvconnect_jobs_completed", load, d(s.planner.loads_ok));
  b.value("kvconnect_jobs_completed", store, d(s.planner.stores_ok));
  b.family("kvconnect_jobs_failed", mt::counter, "Transfer jobs that failed (any cause).");
  b.value("kvconnect_jobs_failed", load, d(s.planner.loads_failed));
  b.value("kvconnect_jobs_failed", store, d(s.planner.stores_failed));
  b.family("kvconnect_jobs_stale", mt::counter,
           "Results of jobs in flight at a cache reset (the pool no longer held their blocks).");
  b.value("kvconnect_jobs_stale", none, d(s.planner.stale_results));
  b.family("kvconnect_cache_resets", mt::counter, "Resets of the CPU pool (reset_cache).");
  b.value("kvconnect_cache_resets", none, d(s.planner.resets));
  b.family("kvconnect_jobs_timed_out", mt::counter, "Jobs failed by their deadline.");
  b.value("kvconnect_jobs_timed_out", none, d(s.coordinator.timed_out));
  b.family("kvconnect_jobs_in_flight", mt::gauge, "Jobs planned and not completed.");
  b.value("kvconnect_jobs_in_flight", none, d(s.jobs_in_flight));
  b.family("kvconnect_reports_dropped", mt::counter,
           "Completion reports the coordinator dropped, by reason.");
  b.value("kvconnect_reports_dropped", {{"reason", "duplicate"}}, d(s.coordinator.duplicates));
  b.value("kvconnect_reports_dropped", {{"reason", "late"}}, d(s.coordinator.late));
  b.value("kvconnect_reports_dropped", {{"reason", "straggler"}},
          d(s.coordinator.absorbed - s.coordinator.late));
  b.value("kvconnect_reports_dropped", {{"reason", "rejected"}}, d(s.coordinator.rejected));
  b.value("kvconnect_reports_dropped", {{"reason", "orphan"}}, d(s.coordinator.orphans_dropped));
  b.family("kvconnect_report_sequence_gaps", mt::counter,
           "Reports missing according to the ranks' sequence numbers.");
  b.value("kvconnect_report_sequence_gaps", none, d(s.coordinator.sequence_gaps));
  b.family("kvconnect_step_frames_dropped", mt::counter, "Step-channel frames refused.");
  b.value("kvconnect_step_frames_dropped", none, d(s.frames_dropped));
  b.family("kvconnect_steps_sent", mt::counter, "Steps whose metadata went to the ranks.");
  b.value("kvconnect_steps_sent", none, d(s.steps_sent));
  b.family("kvconnect_step_round_trip_seconds", mt::histogram,
           "Seconds from a step's metadata sent to its aggregated output applied.");
  b.hist("kvconnect_step_round_trip_seconds", none, s.step_round_trip);
  b.family("kvconnect_world_size", mt::gauge, "Ranks of the topology (TP x PP).");
  b.value("kvconnect_world_size", none, d(s.world_size));
  b.family("kvconnect_ranks_alive", mt::gauge, "Ranks registered and connected.");
  b.value("kvconnect_ranks_alive", none, d(s.ranks_alive));
  b.family("kvconnect_rank_restarts", mt::counter,
           "Ranks that registered again with a higher incarnation.");
  b.value("kvconnect_rank_restarts", none, d(s.coordinator.rank_restarts));
  b.family("kvconnect_job_failures", mt::counter,
           "Failed transfer jobs by cause (the errc of the first failure).");
  for (size_t code = 0; code < errc_count; ++code) {
    if (s.failures_by_error[code] == 0) continue;
    b.value("kvconnect_job_failures",
            {{"error", std::string{to_string(static_cast<errc>(code))}}},
            d(s.failures_by_error[code]));
  }
  b.family("kvconnect_faults_fired", mt::counter, "Injected faults fired, by kind.");
  for (const auto& [kind, n] : s.faults_fired) {
    b.value("kvconnect_faults_fired", {{"kind", kind}}, d(n));
  }
  return b.text();
}

}  // namespace kvc::metrics
