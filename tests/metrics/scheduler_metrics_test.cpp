#include "actors/metrics/scheduler_metrics.hpp"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kvc::metrics {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.starts_with(line + "\n");
}

connector_metadata step_with_store(step_id step, job_id id, size_t blocks) {
  connector_metadata m;
  m.step = step;
  transfer_job j;
  j.id = id;
  j.kind = transfer_kind::store;
  j.slots.assign(blocks, 0);
  m.stores.push_back(j);
  return m;
}

TEST(SchedulerMetricsTest, TransfersCountOnlySuccessfulJobsPerDirection) {
  scheduler_metrics m;
  connector_output out;
  out.step = 1;
  out.jobs = {
      {.job = 1, .kind = transfer_kind::store, .ok = true, .bytes = 3'000'000, .seconds = 0.5},
      {.job = 2, .kind = transfer_kind::load, .ok = true, .bytes = 1000, .seconds = 0.25},
      {.job = 3, .kind = transfer_kind::store, .ok = false, .bytes = 999, .seconds = 9}};
  m.on_output_applied(out, 0);
  const scheduler_sample s = m.sample({});
  EXPECT_EQ(s.store.bytes, 3'000'000u);
  EXPECT_DOUBLE_EQ(s.store.seconds, 0.5);
  EXPECT_EQ(s.store.size.count(), 1u);
  EXPECT_EQ(s.load.bytes, 1000u);
  EXPECT_EQ(s.load.size.counts()[0], 1u);  // <= 1e6

  const std::string text = render(s);
  EXPECT_TRUE(
      has_line(text, "vllm:kv_offload_total_bytes_total{transfer_type=\"GPU_to_CPU\"} 3000000"));
  EXPECT_TRUE(
      has_line(text, "vllm:kv_offload_total_bytes_total{transfer_type=\"CPU_to_GPU\"} 1000"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_store_bytes_total 3000000"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_load_time_total 0.25"));
  EXPECT_TRUE(
      has_line(text, "vllm:kv_offload_size_bucket{transfer_type=\"GPU_to_CPU\",le=\"5000000\"} 1"));
  EXPECT_TRUE(
      has_line(text, "vllm:kv_offload_size_bucket{transfer_type=\"GPU_to_CPU\",le=\"1000000\"} 0"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_store_size_count 1"));
}

// A load the engine's sets settled counts as they settled it: ok with the bytes its ranks
// reported although the coordinator failed it at its deadline (a lost report), failed without
// its bytes although the coordinator said ok; a failure's cause is only ever the coordinator's.
TEST(SchedulerMetricsTest, ASettledLoadCountsAsTheEnginesSetsSettledIt) {
  scheduler_metrics m;
  connector_output out;
  out.step = 4;
  out.jobs = {{.job = 1,
               .kind = transfer_kind::load,
               .ok = false,
               .error = errc::timeout,
               .bytes = 2048,
               .seconds = 0.5},
              {.job = 2, .kind = transfer_kind::load, .ok = true, .bytes = 4096, .seconds = 1},
              {.job = 3, .kind = transfer_kind::load, .ok = false, .error = errc::device_error}};
  const std::vector<scheduler::settled_result> settled{{1, true}, {2, false}, {3, false}};
  m.on_output_applied(out, 0, settled);
  const scheduler_sample s = m.sample({});
  EXPECT_EQ(s.load.bytes, 2048u);
  EXPECT_DOUBLE_EQ(s.load.seconds, 0.5);
  EXPECT_EQ(s.load.size.count(), 1u);
  EXPECT_EQ(s.failures_by_error[static_cast<size_t>(errc::timeout)], 0u);
  EXPECT_EQ(s.failures_by_error[static_cast<size_t>(errc::device_error)], 1u);
  const std::string text = render(s);
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_load_bytes_total 2048"));
  EXPECT_TRUE(
      has_line(text, "vllm:kv_offload_total_bytes_total{transfer_type=\"CPU_to_GPU\"} 2048"));
  EXPECT_EQ(text.find("error=\"timeout\""), std::string::npos);
}

TEST(SchedulerMetricsTest, TheFileTiersJobsAreNoTransfers) {
  scheduler_metrics m;
  connector_output out;
  out.step = 1;
  out.jobs = {{.job = 1, .kind = transfer_kind::cascade, .ok = true, .bytes = 4096},
              {.job = 2, .kind = transfer_kind::promotion, .ok = true, .bytes = 4096},
              {.job = 3, .kind = transfer_kind::check, .ok = true}};
  m.on_output_applied(out, 0);
  const scheduler_sample s = m.sample({});
  EXPECT_EQ(s.store.bytes, 0u);
  EXPECT_EQ(s.store.size.count(), 0u);
  EXPECT_EQ(s.load.bytes, 0u);
  EXPECT_EQ(s.load.size.count(), 0u);
}

TEST(SchedulerMetricsTest, FailedJobsAreCountedByTheirError) {
  scheduler_metrics m;
  connector_output out;
  out.step = 1;
  out.jobs = {
      {.job = 1, .kind = transfer_kind::store, .ok = false, .error = errc::device_unavailable},
      {.job = 2, .kind = transfer_kind::load, .ok = false, .error = errc::timeout},
      {.job = 3, .kind = transfer_kind::store, .ok = false, .error = errc::device_unavailable},
      {.job = 4, .kind = transfer_kind::store, .ok = true, .bytes = 10}};
  m.on_output_applied(out, 0);
  const std::string text = render(m.sample({}));
  EXPECT_TRUE(has_line(text, "kvconnect_job_failures_total{error=\"device_unavailable\"} 2"));
  EXPECT_TRUE(has_line(text, "kvconnect_job_failures_total{error=\"timeout\"} 1"));
  EXPECT_EQ(text.find("kvconnect_job_failures_total{error=\"ok\"}"), std::string::npos);
  EXPECT_EQ(text.find("kvconnect_job_failures_total{error=\"io_error\"}"), std::string::npos);
}

TEST(SchedulerMetricsTest, RoundTripIsObservedForEveryStepUpToTheAppliedOne) {
  scheduler_metrics m;
  m.on_step_sent(step_with_store(1, 10, 3), 1'000'000);
  m.on_step_sent(step_with_store(2, 11, 70), 2'000'000);
  m.on_step_sent(step_with_store(3, 12, 1), 3'000'000);
  connector_output out;
  out.step = 2;
  m.on_output_applied(out, 5'000'000);  // steps 1 and 2: 4 ms and 3 ms
  scheduler_sample s = m.sample({});
  EXPECT_EQ(s.steps_sent, 3u);
  EXPECT_EQ(s.steps_applied, 2u);
  EXPECT_EQ(s.step_round_trip.count(), 2u);
  EXPECT_NEAR(s.step_round_trip.sum(), 0.007, 1e-12);
  // allocation sizes 3, 70, 1 blocks: buckets le=1 -> 1, le=4 -> 2, le=256 -> 3
  const std::string text = render(s);
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_cpu_allocation_size_bucket{le=\"1\"} 1"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_cpu_allocation_size_bucket{le=\"4\"} 2"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_cpu_allocation_size_bucket{le=\"64\"} 2"));
  EXPECT_TRUE(has_line(text, "vllm:kv_offload_cpu_allocation_size_bucket{le=\"256\"} 3"));
  EXPECT_TRUE(has_line(text, "kvconnect_step_round_trip_seconds_count 2"));
  EXPECT_TRUE(has_line(text, "kvconnect_step_round_trip_seconds_bucket{le=\"0.005\"} 2"));
  EXPECT_TRUE(has_line(text, "kvconnect_step_round_trip_seconds_bucket{le=\"0.0025\"} 0"));
  // A later output closes step 3 too; an output for an already closed step observes nothing.
  out.step = 3;
  m.on_output_applied(out, 4'000'000);
  m.on_output_applied(out, 9'000'000);
  EXPECT_EQ(m.sample({}).step_round_trip.count(), 3u);
}

TEST(SchedulerMetricsTest, CountersComeFromThePureClassesStats) {
  scheduler::connector_stats ps;
  ps.lookups = 40;
  ps.hit_blocks = 12;
  ps.loads_planned = 3;
  ps.stores_planned = 5;
  ps.loads_ok = 2;
  ps.loads_failed = 1;
  ps.stores_ok = 4;
  ps.store_retries = 6;
  ps.resets = 2;
  ps.stale_results = 13;
  coordinator::aggregator_stats cs;
  cs.duplicates = 7;
  cs.absorbed = 8;
  cs.late = 3;
  cs.timed_out = 9;
  cs.rank_restarts = 2;
  scheduler_metrics m;
  scheduler_sample s = m.sample({.planner = &ps,
                                 .coordinator = &cs,
                                 .stores_skipped = 11,
                                 .pool_capacity = 8,
                                 .pool_used = 2,
                                 .jobs_in_flight = 1,
                                 .world_size = 4,
                                 .ranks_alive = 3,
                                 .frames_dropped = 5,
                                 .faults_fired = {{"drop_report", 2}}});
  const std::string text = render(s);
  for (const char* line : {
           "kvconnect_lookup_blocks_total 40",
           "kvconnect_lookup_hit_blocks_total 12",
           "kvconnect_jobs_submitted_total{kind=\"load\"} 3",
           "kvconnect_jobs_submitted_total{kind=\"store\"} 5",
           "kvconnect_jobs_completed_total{kind=\"store\"} 4",
           "kvconnect_jobs_failed_total{kind=\"load\"} 1",
           "kvconnect_jobs_timed_out_total 9",
           "kvconnect_jobs_stale_total 13",
           "kvconnect_cache_resets_total 2",
           "kvconnect_jobs_in_flight 1",
           "kvconnect_reports_dropped_total{reason=\"duplicate\"} 7",
           "kvconnect_reports_dropped_total{reason=\"late\"} 3",
           "kvconnect_reports_dropped_total{reason=\"straggler\"} 5",
           "kvconnect_step_frames_dropped_total 5",
           "kvconnect_ranks_alive 3",
           "kvconnect_world_size 4",
           "kvconnect_rank_restarts_total 2",
           "kvconnect_faults_fired_total{kind=\"drop_report\"} 2",
           "vllm:kv_offload_allocation_failure_total 6",
           "vllm:kv_offload_stores_skipped_total 11",
           "vllm:kv_offload_cpu_cache_usage_perc 0.25",
       }) {
    EXPECT_TRUE(has_line(text, line)) << line;
  }
}

TEST(SchedulerMetricsTest, TheFileTiersSeriesCarryItsLabelAndOnlyExistWithATier) {
  scheduler_metrics m;
  connector_output out;
  out.step = 1;
  out.jobs = {
      {.job = 1, .kind = transfer_kind::cascade, .ok = true, .bytes = 4096, .seconds = 0.5},
      {.job = 2, .kind = transfer_kind::cascade, .ok = true, .bytes = 2048, .seconds = 0.25},
      {.job = 3, .kind = transfer_kind::promotion, .ok = true, .bytes = 1024, .seconds = 0.125},
      {.job = 4, .kind = transfer_kind::promotion, .ok = false, .error = errc::io_error},
      {.job = 5, .kind = transfer_kind::cascade, .ok = false, .error = errc::io_error},
      {.job = 6, .kind = transfer_kind::promotion, .ok = false, .error = errc::not_found},
      {.job = 7, .kind = transfer_kind::check, .ok = false, .error = errc::not_found}};
  m.on_output_applied(out, 0);
  EXPECT_EQ(render(m.sample({})).find("kv_offload_tiering"), std::string::npos);

  scheduler::file_tier_counters c;
  c.ledger.queries = 9;
  c.ledger.hits = 4;
  c.ledger.cascades_skipped_queue_full = 3;
  c.ledger.cascades_skipped_no_room = 1;
  c.ledger.evictions = 5;
  c.ledger.dropped_bad_file = 2;
  c.promotion_jobs = 6;
  c.cascade_jobs = 7;
  c.check_jobs = 8;
  c.promotions_no_room = 10;
  const std::string text = render(m.sample({.file_tier = &c}));
  for (const char* line : {
           "vllm:kv_offload_tiering_write_bytes_total{tier=\"1:fs\"} 6144",
           "vllm:kv_offload_tiering_write_time_total{tier=\"1:fs\"} 0.75",
           "vllm:kv_offload_tiering_read_bytes_total{tier=\"1:fs\"} 1024",
           "vllm:kv_offload_tiering_read_time_total{tier=\"1:fs\"} 0.125",
           "vllm:kv_offload_tiering_promotion_job_failures_total{tier=\"1:fs\"} 2",
           "vllm:kv_offload_tiering_cascade_job_failures_total{tier=\"1:fs\"} 1",
           "vllm:kv_offload_tiering_block_queries_total{tier=\"1:fs\"} 9",
           "vllm:kv_offload_tiering_block_hits_total{tier=\"1:fs\"} 4",
           "kvconnect_tier_jobs_submitted_total{tier=\"1:fs\",kind=\"promotion\"} 6",
           "kvconnect_tier_jobs_submitted_total{tier=\"1:fs\",kind=\"cascade\"} 7",
           "kvconnect_tier_jobs_submitted_total{tier=\"1:fs\",kind=\"check\"} 8",
           "kvconnect_tier_cascades_skipped_total{tier=\"1:fs\",reason=\"queue_full\"} 3",
           "kvconnect_tier_cascades_skipped_total{tier=\"1:fs\",reason=\"no_room\"} 1",
           "kvconnect_tier_promotions_no_room_total{tier=\"1:fs\"} 10",
           "kvconnect_tier_evictions_total{tier=\"1:fs\"} 5",
           "kvconnect_tier_bad_files_total{tier=\"1:fs\"} 2",
       }) {
    EXPECT_TRUE(has_line(text, line)) << line;
  }
}

TEST(SchedulerMetricsTest, EveryFamilyHasHelpThenTypeOnce) {
  const std::string text = render(scheduler_metrics{}.sample({}));
  size_t pos = 0;
  int families = 0;
  while ((pos = text.find("# HELP ", pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos);
    const std::string name = text.substr(pos + 7, text.find(' ', pos + 7) - pos - 7);
    EXPECT_EQ(text.compare(eol + 1, 8 + name.size(), "# TYPE " + name + " "), 0) << name;
    EXPECT_EQ(text.find("# HELP " + name + " ", eol), std::string::npos) << name;
    ++families;
    pos = eol;
  }
  EXPECT_GE(families, 30);
  EXPECT_TRUE(text.ends_with("\n"));
}

}  // namespace
}  // namespace kvc::metrics
