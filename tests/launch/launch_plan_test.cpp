// The plan derived from a launch config: KV geometry per rank, vLLM's pool sizing
// (cpu_bytes_to_use over all ranks), the rank → node placement, and the facade configs the
// scheduler and every rank get (checked by embed::validate).
#include "launch/config/launch_plan.hpp"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launch/config/config_loader.hpp"
#include "launch/roles/node_processes.hpp"
#include "launch/roles/role_options.hpp"

namespace kvc::launch {
namespace {

using ::testing::ElementsAre;

launch_config loaded(const std::string& text, std::vector<std::string> overrides = {}) {
  auto l = load_config(text, "plan.yaml", overrides);
  EXPECT_TRUE(l.ok()) << (l.errors.empty() ? "" : l.errors[0].to_string());
  return l.config;
}

const char* tp4pp2 =
    "topology: {tensor_parallel: 4, pipeline_parallel: 2}\n"
    "kv_cache: {layers: 16, kv_heads: 8, head_dim: 128, dtype_bytes: 2, gpu_block_size: 16,\n"
    "           gpu_blocks: 32}\n"
    "offload: {cpu_bytes_to_use: 512MiB, block_size: 32, eviction_policy: arc,\n"
    "          store_threshold: 2, max_tracker_size: 1000}\n"
    "runtime: {port: 5710, job_timeout_ms: 250, register_timeout_ms: 700}\n"
    "workload: {prompt_tokens: {min: 64, max: 384}, shared_prefix_tokens: {min: 32, max: 256},\n"
    "           output_tokens: {min: 8, max: 64}}\n";

TEST(LaunchPlanTest, GeometrySplitsHeadsOverTpAndLayersOverPp) {
  const auto g = derive_geometry(loaded(tp4pp2));
  EXPECT_EQ(g.world_size, 8u);
  EXPECT_EQ(g.kv_heads_per_rank, 2u);
  EXPECT_EQ(g.layers_per_rank, 8u);
  EXPECT_EQ(g.factor, 2u);
  EXPECT_EQ(g.page_bytes, 2u * 16 * 2 * 128 * 2);             // K and V of one GPU block
  EXPECT_EQ(g.slot_bytes, 2u * 8 * (2u * 16 * 2 * 128 * 2));  // factor x layers x page
}

TEST(LaunchPlanTest, FewerHeadsThanRanksAreReplicatedAndUnevenStagesTakeTheLargest) {
  const auto g =
      derive_geometry(loaded("topology: {tensor_parallel: 8, pipeline_parallel: 3}\n"
                             "kv_cache: {layers: 7, kv_heads: 2}\n"
                             "offload: {cpu_bytes_to_use: 1GiB}\n"));
  EXPECT_EQ(g.kv_heads_per_rank, 1u);
  EXPECT_EQ(g.layers_per_rank, 3u);  // stages of 3, 2, 2 layers: slots fit the largest
}

TEST(LaunchPlanTest, PoolFollowsVllmSizingOverAllRanks) {
  auto plan = make_plan(loaded(tp4pp2), "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const uint64_t slot = 2u * 8 * (2u * 16 * 2 * 128 * 2);
  EXPECT_EQ(plan->pool.world_size, 8u);
  EXPECT_EQ(plan->pool.slot_bytes, slot);
  EXPECT_EQ(plan->pool.num_slots, (512ull << 20) / 8 / slot);  // 256
  EXPECT_EQ(plan->synthetic.slot_bytes(), slot);
  EXPECT_EQ(plan->synthetic.layers, 8u);
  EXPECT_EQ(plan->synthetic.block_factor, 2u);
  EXPECT_EQ(plan->synthetic.gpu_blocks, 32u);
}

TEST(LaunchPlanTest, SchedulerConfigCarriesTheOffloadSection) {
  auto plan = make_plan(loaded(tp4pp2), "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const auto& s = plan->scheduler;
  EXPECT_TRUE(embed::validate(s).ok());
  EXPECT_EQ(s.token, "secret");
  EXPECT_EQ(s.topology, (topology{4, 2, 0}));
  EXPECT_EQ(s.network.port, 5710);
  EXPECT_EQ(s.pool.instance, "inst");
  EXPECT_EQ(s.pool.slots_per_rank, 256u);
  EXPECT_EQ(s.pool.slot_bytes, plan->pool.slot_bytes);
  EXPECT_EQ(s.planner.gpu_block_size, 16u);
  EXPECT_EQ(s.planner.offloaded_block_size, 32u);
  EXPECT_EQ(s.planner.manager.capacity, 256u);
  EXPECT_EQ(s.planner.manager.policy, scheduler::eviction_policy::arc);
  EXPECT_EQ(s.planner.manager.store_threshold, 2u);
  EXPECT_EQ(s.planner.manager.max_tracker_size, 1000u);
  EXPECT_TRUE(s.planner.enable_prefix_caching);
  EXPECT_EQ(s.job_timeout, std::chrono::milliseconds{250});
  EXPECT_THAT(embed::segment_name_for(s.pool, s.topology), ::testing::EndsWith("-inst-node0"));
  auto no_prefix_caching =
      make_plan(loaded(tp4pp2, {"kv_cache.enable_prefix_caching=false"}), "inst", "secret");
  ASSERT_TRUE(no_prefix_caching.ok()) << no_prefix_caching.error().to_string();
  EXPECT_FALSE(no_prefix_caching->scheduler.planner.enable_prefix_caching);
}

TEST(LaunchPlanTest, AnEnginesPageBytesAndHashBlockSizeSizeThePoolAndThePlanner) {
  // What kvconnect.vllm passes: the bytes of one GPU block over the rank's KV tensors, one page
  // per stage, vLLM's hash block size; 6 heads would not split over TP 4, but no head counts.
  auto plan = make_plan(loaded("topology: {tensor_parallel: 4}\n"
                               "kv_cache: {layers: 1, kv_heads: 6, page_bytes: 3000,\n"
                               "           gpu_block_size: 16, hash_block_size: 8}\n"
                               "offload: {cpu_bytes_to_use: 240000, block_size: 32}\n"),
                        "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_EQ(plan->kv.page_bytes, 3000u);
  EXPECT_EQ(plan->pool.slot_bytes, 2u * 3000);
  EXPECT_EQ(plan->pool.num_slots, 240000u / (4 * 2 * 3000));  // vLLM's sizing: 10
  EXPECT_EQ(plan->scheduler.planner.hash_block_size, 8u);
}

TEST(LaunchPlanTest, AnEmbeddingEngineSkipsTheLaunchsOwnChecks) {
  // 2 slots and 16 GPU blocks of 4 tokens: too few for the smoke run and for the simulated
  // engine's longest request, which an engine with its own scheduler does not run.
  const std::string text =
      "topology: {tensor_parallel: 1}\n"
      "kv_cache: {layers: 1, page_bytes: 4096, gpu_block_size: 4, gpu_blocks: 16}\n"
      "offload: {cpu_bytes_to_use: 4096}\n";
  auto launched = load_config(text, "engine.yaml", {});
  std::vector<std::string> keys;
  for (const auto& e : launched.errors) keys.push_back(e.key_path);
  EXPECT_THAT(keys,
              ::testing::UnorderedElementsAre("offload.cpu_bytes_to_use", "kv_cache.gpu_blocks"));
  auto engine = load_config(text, "engine.yaml", {}, config_use::engine);
  EXPECT_TRUE(engine.ok()) << engine.errors[0].to_string();
  EXPECT_TRUE(make_plan(engine.config, "inst", "secret", config_use::engine).ok());
  EXPECT_FALSE(make_plan(engine.config, "inst", "secret").ok());
  // A hash block that does not divide the GPU block is named.
  const std::vector<std::string> hash3{"kv_cache.hash_block_size=3"};
  auto bad = load_config(text, "engine.yaml", hash3, config_use::engine);
  ASSERT_EQ(bad.errors.size(), 1u);
  EXPECT_EQ(bad.errors[0].key_path, "kv_cache.hash_block_size");
}

TEST(LaunchPlanTest, EveryRankGetsAWorkerConfigOnItsNode) {
  auto plan = make_plan(
      loaded(tp4pp2, {"topology.nodes=[{name: a, host: 10.0.0.1}, {name: b, host: 10.0.0.2}]"}),
      "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  EXPECT_THAT(plan->rank_node, ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT(plan->ranks_on(1), ElementsAre(4, 5, 6, 7));
  ASSERT_EQ(plan->workers.size(), 8u);
  for (rank_id r = 0; r < 8; ++r) {
    const auto& w = plan->workers[r];
    EXPECT_TRUE(embed::validate(w).ok()) << r;
    EXPECT_EQ(w.rank, r);
    EXPECT_EQ(w.topology.node, r / 4);
    EXPECT_EQ(w.device, static_cast<int>(r % 4));  // the rank's GPU on its node
    EXPECT_EQ(w.network.host, "10.0.0.1");         // the scheduler runs on the first node
    EXPECT_EQ(w.network.port, 5710);
    EXPECT_EQ(w.block_size_factor, 2u);
    EXPECT_EQ(w.backend, "sim");
    EXPECT_EQ(w.register_timeout, std::chrono::milliseconds{700});
    EXPECT_EQ(w.pool.slots_per_rank, plan->scheduler.pool.slots_per_rank);
  }
}

TEST(LaunchPlanTest, DefaultPlacementFillsNodesInOrder) {
  topology_section t;
  t.nodes = {{"a", "h", 0}, {"b", "h", 0}, {"c", "h", 0}};
  t.tensor_parallel = 4;
  t.pipeline_parallel = 2;
  EXPECT_THAT(rank_nodes(t), ElementsAre(0, 0, 0, 1, 1, 1, 2, 2));
  t.placement = {"c", "b", "a", "zz"};
  EXPECT_THAT(rank_nodes(t), ElementsAre(2, 1, 0, 3));  // 3: not a node
}

TEST(LaunchPlanTest, NoPlanWithoutOffloadOrForAnInvalidConfig) {
  auto off = make_plan(loaded("offload: {enabled: false}\n"), "inst", "secret");
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.error().code(), errc::invalid_argument);
  launch_config bad;
  bad.offload.block_size = 24;
  auto invalid = make_plan(bad, "inst", "secret");
  ASSERT_FALSE(invalid.ok());
  EXPECT_THAT(invalid.error().message(), ::testing::HasSubstr("offload.block_size"));
}

// A run without offloading shares the geometry of the same run with it (the ranks, their KV
// cache, the network); its role processes are told to offload nothing.
TEST(LaunchPlanTest, WithoutOffloadTheGeometryPlanIsTheOneWithItAndTheProcessesOffloadNothing) {
  const auto off = loaded(tp4pp2, {"offload.enabled=false"});
  auto geometry = make_geometry_plan(off, "inst", "secret");
  ASSERT_TRUE(geometry.ok()) << geometry.error().to_string();
  auto on = make_plan(loaded(tp4pp2), "inst", "secret");
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(geometry->kv.slot_bytes, on->kv.slot_bytes);
  EXPECT_EQ(geometry->kv.layers_per_rank, on->kv.layers_per_rank);
  EXPECT_EQ(geometry->rank_node, on->rank_node);
  EXPECT_EQ(geometry->synthetic.page_bytes, on->synthetic.page_bytes);
  // With offloading on it is make_plan's plan.
  auto same = make_geometry_plan(loaded(tp4pp2), "inst", "secret");
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->pool.num_slots, on->pool.num_slots);
  EXPECT_FALSE(scheduler_options_of(off, *geometry, engine_kind::sim).offload);
  auto w = worker_options_of(off, *geometry, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_FALSE(w->offload);
  auto w_on = worker_options_of(loaded(tp4pp2), *on, 1);
  ASSERT_TRUE(w_on.ok());
  EXPECT_TRUE(w_on->offload);
}

// A child of a launch gets the plan, not flags rebuilt from it: the config on its stdin and
// what only the run knows on its command line.
TEST(LaunchPlanTest, TheNodesProcessesGetTheConfigAndWhatOnlyTheRunKnows) {
  EXPECT_EQ(scheduler_arguments(engine_kind::smoke),
            (std::vector<std::string>{"scheduler", "--config", "-", "--engine", "smoke"}));
  EXPECT_EQ(scheduler_arguments(engine_kind::sim).back(), "sim");
  const std::vector<std::string> worker{"worker", "--config", "-",   "--rank",        "5",
                                        "--port", "4242",     "--incarnation", "2"};
  EXPECT_EQ(worker_arguments(5, 4242, 2), worker);
  auto with_executor = worker;
  with_executor.insert(with_executor.end(), {"--executor", "tcp://127.0.0.1:9"});
  EXPECT_EQ(worker_arguments(5, 4242, 2, "tcp://127.0.0.1:9"), with_executor);
  for (auto e : {engine_kind::serve, engine_kind::smoke, engine_kind::sim}) {
    auto back = parse_engine_kind(to_string(e));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, e);
  }
  auto bad = parse_engine_kind("fast");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "--engine fast: serve, smoke or sim");

  // The config a child reads: the instance resolved, the token left out (it travels in
  // $KVCONNECT_TOKEN); loading it back gives the launch's config.
  auto c = loaded(tp4pp2, {"runtime.token=secret"});
  const std::string yaml = child_config_yaml(c, "inst");
  EXPECT_EQ(yaml.find("secret"), std::string::npos);
  auto expected = c;
  expected.runtime.token.clear();
  expected.runtime.instance = "inst";
  auto back = load_config(yaml, "<stdin>", {});
  ASSERT_TRUE(back.ok()) << back.errors[0].to_string();
  EXPECT_EQ(back.config, expected);
}

// Both roles of a node map one config to the same topology and pool (the worker's layout
// checksum matches the segment), with the values `kvconnect launch` used to pass as flags.
TEST(LaunchPlanTest, TheRolesMapOneConfigToTheSameTopologyAndPool) {
  const auto c = loaded(tp4pp2, {"runtime.port=0", "workload.steps=30"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const auto s = scheduler_options_of(c, *plan, engine_kind::smoke);
  EXPECT_EQ(s.topology, (topology{4, 2, 0}));
  EXPECT_EQ(s.pool.instance, "inst");
  EXPECT_EQ(s.pool.slots, 256u);
  EXPECT_EQ(s.pool.kv.layers, 8u);
  EXPECT_EQ(s.pool.kv.page_bytes, 16384u);
  EXPECT_EQ(s.pool.kv.gpu_blocks, 32u);
  EXPECT_EQ(s.pool.kv.block_factor, 2u);
  EXPECT_EQ(s.network.heartbeat_ms, 100u);
  EXPECT_EQ(s.network.connection_timeout_ms, 1000u);
  EXPECT_EQ(s.token, "secret");
  EXPECT_EQ(s.host, "127.0.0.1");
  EXPECT_EQ(s.port, 0);
  EXPECT_FALSE(s.prefault);
  EXPECT_EQ(s.job_timeout_ms, 250u);
  EXPECT_EQ(s.job_timeout_steps, 1000u);
  EXPECT_EQ(s.ready_timeout_ms, 30000u);
  EXPECT_EQ(s.step_timeout_ms, 60000u);
  EXPECT_EQ(s.stop_timeout_ms, 5000u);
  EXPECT_EQ(s.engine, engine_kind::smoke);
  EXPECT_EQ(s.smoke_steps, 30u);
  ASSERT_TRUE(s.config);
  EXPECT_EQ(s.config->config, c);
  EXPECT_TRUE(s.offload);
  EXPECT_FALSE(s.rank_restarts);
  EXPECT_TRUE(s.rank_nodes.empty());  // one node
  EXPECT_TRUE(s.trace.dir.empty());
  // The simulated engine runs on the config and plan themselves.
  const auto sim = scheduler_options_of(c, *plan, engine_kind::sim);
  EXPECT_EQ(sim.engine, engine_kind::sim);
  ASSERT_TRUE(sim.config);
  EXPECT_EQ(sim.config->config, c);
  EXPECT_EQ(sim.config->plan.kv.slot_bytes, plan->kv.slot_bytes);
  EXPECT_EQ(scheduler_options_of(c, *plan, engine_kind::serve).engine, engine_kind::serve);

  auto w = worker_options_of(c, *plan, 5);
  ASSERT_TRUE(w.ok()) << w.error().to_string();
  EXPECT_EQ(w->topology, s.topology);
  EXPECT_EQ(w->pool.instance, s.pool.instance);
  EXPECT_EQ(w->pool.slots, s.pool.slots);
  EXPECT_EQ(w->pool.kv.slot_bytes(), s.pool.kv.slot_bytes());
  EXPECT_EQ(w->network.heartbeat_ms, 100u);
  EXPECT_EQ(w->token, "secret");
  EXPECT_EQ(w->host, "127.0.0.1");
  EXPECT_EQ(w->port, 0);  // the run's: the scheduler's "listening" line
  EXPECT_EQ(w->rank, 5u);
  EXPECT_EQ(w->incarnation, 0u);
  EXPECT_EQ(w->backend, "sim");
  EXPECT_EQ(w->device, 5);
  EXPECT_TRUE(w->prefault);
  EXPECT_EQ(w->register_timeout_ms, 700u);
  EXPECT_EQ(w->gpu_block_size, 16u);
  EXPECT_TRUE(w->executor.empty());
  auto outside = worker_options_of(c, *plan, 8);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().message(), "--rank 8 is outside the world of 8 ranks");

  // on-failure: the scheduler's smoke run waits for a restarted rank.
  auto restarting = c;
  restarting.topology.restart = {"on-failure", 3};
  EXPECT_TRUE(scheduler_options_of(restarting, *plan, engine_kind::smoke).rank_restarts);
  restarting.topology.restart = {"on-failure", 0};
  EXPECT_FALSE(scheduler_options_of(restarting, *plan, engine_kind::smoke).rank_restarts);
  // Traces: every process writes into observe.trace_dir at the config's level.
  auto traced = loaded(tp4pp2, {"observe.trace=jobs", "observe.trace_dir=/tmp/t"});
  auto traced_plan = make_plan(traced, "inst", "secret");
  ASSERT_TRUE(traced_plan.ok());
  const auto t = scheduler_options_of(traced, *traced_plan, engine_kind::smoke);
  EXPECT_EQ(t.trace.dir, "/tmp/t");
  EXPECT_EQ(t.trace.level, "jobs");
  EXPECT_EQ(worker_options_of(traced, *traced_plan, 1)->trace.dir, "/tmp/t");
}

TEST(LaunchPlanTest, SeveralNodesGiveTheSchedulerEveryRanksNode) {
  const auto c = loaded(
      "topology: {tensor_parallel: 2, pipeline_parallel: 1, nodes: [{name: a, host: 10.0.0.1}, "
      "{name: b, host: 10.0.0.2}]}\nruntime: {port: 5710}\n");
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const auto s = scheduler_options_of(c, *plan, engine_kind::smoke);
  EXPECT_EQ(s.host, "10.0.0.1");
  EXPECT_THAT(s.rank_nodes, ElementsAre(0, 1));
  auto w = worker_options_of(c, *plan, 1);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->topology.node, 1u);
  EXPECT_EQ(w->host, "10.0.0.1");  // where the scheduler listens
  EXPECT_EQ(w->device, 0);         // the first device of its node
}

TEST(LaunchPlanTest, ObserveReachesTheSchedulerConfigAndOptions) {
  const auto c = loaded(
      tp4pp2, {"observe.metrics_port=9400", "observe.kv_events.endpoint=tcp://*:5557",
               "observe.kv_events.replay_endpoint=tcp://*:5558", "observe.kv_events.topic=kv"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const auto& o = plan->scheduler.observe;
  EXPECT_TRUE(o.serve_metrics);
  EXPECT_EQ(o.metrics_port, 9400);
  EXPECT_EQ(o.kv_events_endpoint, "tcp://*:5557");
  EXPECT_EQ(o.kv_events_replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(o.kv_events_topic, "kv");
  const auto s = scheduler_options_of(c, *plan, engine_kind::smoke);
  EXPECT_EQ(s.metrics_port, 9400);
  EXPECT_EQ(s.kv_events_endpoint, "tcp://*:5557");
  EXPECT_EQ(s.kv_events_replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(s.kv_events_topic, "kv");
  EXPECT_TRUE(s.record_dir.empty());
  // Off by default.
  const auto off = loaded(tp4pp2);
  auto plain = make_plan(off, "inst", "secret");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->scheduler.observe.serve_metrics);
  const auto p = scheduler_options_of(off, *plain, engine_kind::smoke);
  EXPECT_EQ(p.metrics_port, 0);
  EXPECT_TRUE(p.kv_events_endpoint.empty());
  // observe.record without record_dir: the record goes to trace_dir.
  const auto rec = loaded(tp4pp2, {"observe.record=true", "observe.trace_dir=/tmp/r"});
  auto rec_plan = make_plan(rec, "inst", "secret");
  ASSERT_TRUE(rec_plan.ok());
  EXPECT_EQ(scheduler_options_of(rec, *rec_plan, engine_kind::smoke).record_dir, "/tmp/r");
}

TEST(LaunchPlanTest, EachProcessGetsTheFaultsThatConcernIt) {
  const auto c = loaded(tp4pp2, {"runtime.fault_seed=9",
                                 "runtime.faults=[\"drop_report:rank=1,p=0.5\", "
                                 "\"fail_copy:rank=5,dir=load,nth=2\", \"delay_copy:p=0.25\"]"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  // The scheduler injects the channel's and reports every rank's copy faults.
  const auto s = scheduler_options_of(c, *plan, engine_kind::smoke);
  EXPECT_EQ(s.faults.seed, 9u);
  EXPECT_EQ(s.faults.specs,
            (std::vector<std::string>{"drop_report:rank=1,p=0.5", "fail_copy:rank=5,dir=load,nth=2",
                                      "delay_copy:p=0.25"}));
  auto w5 = worker_options_of(c, *plan, 5);
  ASSERT_TRUE(w5.ok());
  EXPECT_EQ(w5->faults.seed, 9u);
  EXPECT_EQ(w5->faults.specs,
            (std::vector<std::string>{"fail_copy:rank=5,dir=load,nth=2", "delay_copy:p=0.25"}));
  EXPECT_EQ(worker_options_of(c, *plan, 4)->faults.specs,
            (std::vector<std::string>{"delay_copy:p=0.25"}));
  const auto none = loaded(tp4pp2, {});
  auto plain = make_plan(none, "inst", "secret");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(worker_options_of(none, *plain, 0)->faults.specs.empty());
  EXPECT_TRUE(scheduler_options_of(none, *plain, engine_kind::smoke).faults.specs.empty());
}

// The engine of a launch waits up to runtime.step_timeout_ms for each step's output; the
// coordinator releases a step whose report was lost at runtime.job_timeout_ms. A wait that ends
// first turns one lost report into the end of the run (issue 23: the defaults were 10 s and
// 30 s), so the loader refuses it, naming both keys, and the defaults keep the wait longer.
TEST(LaunchPlanTest, AStepWaitThatDoesNotOutlastTheJobDeadlineIsRefusedNamingBothKeys) {
  const launch_config defaults;
  EXPECT_GT(defaults.runtime.step_timeout_ms, defaults.runtime.job_timeout_ms);
  EXPECT_TRUE(load_config("", "defaults.yaml", {}).ok());
  for (const char* step : {"10000", "30000"}) {
    const std::vector<std::string> set{std::string("runtime.step_timeout_ms=") + step};
    auto l = load_config("runtime: {job_timeout_ms: 30000}\n", "t.yaml", set);
    ASSERT_EQ(l.errors.size(), 1u) << step;
    EXPECT_EQ(l.errors[0].key_path, "runtime.step_timeout_ms");
    EXPECT_EQ(l.errors[0].to_string(),
              std::string("--set: runtime.step_timeout_ms: runtime.step_timeout_ms (") + step +
                  ") must exceed runtime.job_timeout_ms (30000): the engine would stop waiting "
                  "for a step before the coordinator fails the jobs of a lost report, and the "
                  "report would end the run");
  }
  EXPECT_TRUE(load_config("runtime: {job_timeout_ms: 30000, step_timeout_ms: 30001}\n", "t.yaml",
                          {})
                  .ok());
  // No deadline by time is for runs that take what has arrived (the soak); a launch refuses it
  // (LaunchMultiprocTest.ALaunchRefusesAJobDeadlineThatCannotReleaseALostStep).
  EXPECT_TRUE(load_config("runtime: {job_timeout_ms: 0}\n", "t.yaml", {}).ok());
  EXPECT_EQ(step_wait_problem(60000, 0, "s", "j", false), "");
  EXPECT_EQ(step_wait_problem(60000, 0, "s", "j", true),
            "j is 0 (no deadline by time), but the engine waits for each step's output for s "
            "(60000) and only a deadline by time releases a step whose report was lost: a lost "
            "report would end the run; set j below s");
}

}  // namespace
}  // namespace kvc::launch

namespace kvc::launch {
namespace {

// A worker faults in and pins its region before it registers: the scheduler's wait grows with
// the region (1 GiB/s), so 100 GiB per rank does not run out a timeout sized for a small pool.
TEST(ReadyTimeoutTest, GrowsWithTheRankRegionAtOneGibPerSecond) {
  using std::chrono::milliseconds;
  EXPECT_EQ(ready_timeout_for(30'000, 0), milliseconds{30'000});
  EXPECT_EQ(ready_timeout_for(30'000, uint64_t{100} << 30), milliseconds{130'000});
  EXPECT_EQ(ready_timeout_for(1, uint64_t{64} << 20), milliseconds{63});
}

/// tp4pp2 with `tiers` as its offload.secondary_tiers (a YAML flow sequence).
std::string with_tiers(const std::string& tiers) {
  std::string text = tp4pp2;
  const std::string end = "max_tracker_size: 1000}";
  text.replace(text.find(end), end.size(),
               "max_tracker_size: 1000,\n          secondary_tiers: " + tiers + "}");
  return text;
}

TEST(LaunchPlanTest, AFileTierReachesTheSchedulerAndEveryRankAlike) {
  auto plan = make_plan(loaded(with_tiers("[{type: fs, root_dir: /tmp/kv, capacity_bytes: 1GiB, "
                                          "n_read_threads: 3, n_write_threads: 2}]")),
                        "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  ASSERT_TRUE(plan->scheduler.file_tier.has_value());
  const embed::file_tier_config& t = *plan->scheduler.file_tier;
  EXPECT_EQ(t.root_dir, "/tmp/kv");
  EXPECT_EQ(t.capacity_bytes, 1ull << 30);
  EXPECT_EQ(t.n_read_threads, 3u);
  EXPECT_EQ(t.n_write_threads, 2u);
  EXPECT_NE(t.kv_description.find("head_dim=128"), std::string::npos);
  ASSERT_EQ(plan->workers.size(), 8u);
  for (const auto& w : plan->workers) {
    ASSERT_TRUE(w.file_tier.has_value());
    EXPECT_EQ(w.file_tier->root_dir, t.root_dir);
    EXPECT_EQ(w.file_tier->kv_description, t.kv_description);
  }
  auto none = make_plan(loaded(tp4pp2), "inst", "secret");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->scheduler.file_tier.has_value());
  EXPECT_FALSE(none->workers[0].file_tier.has_value());
}

TEST(LaunchPlanTest, TwoTiersOrATierSmallerThanABlockFileAreRefused) {
  launch_config c = loaded(tp4pp2);
  c.offload.secondary_tiers = {{.root_dir = "/a", .capacity_bytes = 1ull << 30},
                               {.root_dir = "/b", .capacity_bytes = 1ull << 30}};
  status s = check_tier_config(c);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("offload.secondary_tiers: 2 tiers"));
  EXPECT_EQ(make_plan(c, "inst", "secret").code(), errc::invalid_argument);
  c.offload.secondary_tiers.resize(1);
  EXPECT_TRUE(check_tier_config(c).ok());
  c.offload.secondary_tiers[0].capacity_bytes = 4096;  // one block file takes 260 KiB
  s = check_tier_config(c);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("offload.secondary_tiers[0].capacity_bytes: "
                                                "4096 bytes hold no block file of 266240"));
  EXPECT_EQ(make_plan(c, "inst", "secret").code(), errc::invalid_argument);
}

TEST(LaunchPlanTest, FailIoWithoutAFileTierIsRefusedNamingTheFault) {
  launch_config c = loaded(tp4pp2);
  c.runtime.faults = {"fail_copy:p=0.1", "fail_io:op=read,p=0.5"};
  const status s = check_tier_config(c);
  EXPECT_EQ(s.code(), errc::invalid_argument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("runtime.faults: fail_io:op=read,p=0.5: fail_io "
                                                "fails file tier jobs, and there is no file tier"));
  EXPECT_EQ(make_plan(c, "inst", "secret").code(), errc::invalid_argument);
  c.runtime.faults = {"fail_copy:p=0.1"};
  EXPECT_TRUE(check_tier_config(c).ok());
  c.runtime.faults = {"fail_io:op=read,p=0.5"};
  c.offload.secondary_tiers = {{.root_dir = "/a", .capacity_bytes = 1ull << 30}};
  EXPECT_TRUE(check_tier_config(c).ok());
}

TEST(LaunchPlanTest, TheSchedulerAndEveryWorkerGetThePlansTier) {
  const auto c = loaded(with_tiers("[{root_dir: /tmp/kv, capacity_bytes: 1GiB, "
                                   "n_read_threads: 3, direct_io: false, io_engine: threads, "
                                   "io_depth: 8}]"),
                        {"runtime.port=0"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const embed::file_tier_config& want = *plan->scheduler.file_tier;
  auto expect_tier = [&](const tier_options& t, const std::string& who) {
    SCOPED_TRACE(who);
    const auto got = t.config();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->root_dir, "/tmp/kv");
    EXPECT_EQ(got->capacity_bytes, 1ull << 30);
    EXPECT_EQ(got->n_read_threads, 3u);
    EXPECT_EQ(got->n_write_threads, 16u);
    EXPECT_EQ(got->max_pending_cascades, 1024u);
    EXPECT_FALSE(got->direct_io);
    EXPECT_EQ(got->io_engine, "threads");
    EXPECT_EQ(got->io_depth, 8u);
    EXPECT_EQ(got->kv_description, want.kv_description);
  };
  expect_tier(scheduler_options_of(c, *plan, engine_kind::sim).pool.tier, "scheduler");
  for (rank_id r = 0; r < plan->workers.size(); ++r) {
    auto w = worker_options_of(c, *plan, r);
    ASSERT_TRUE(w.ok()) << w.error().to_string();
    expect_tier(w->pool.tier, "worker " + std::to_string(r));
  }
  // The flags a role run by hand takes give the same tier.
  expect_tier(tier_options::of(want), "tier_options::of");
  EXPECT_FALSE(tier_options{}.config().has_value());
  const auto none = make_plan(loaded(tp4pp2, {"runtime.port=0"}), "inst", "secret");
  ASSERT_TRUE(none.ok());
  const auto c2 = loaded(tp4pp2, {"runtime.port=0"});
  EXPECT_FALSE(scheduler_options_of(c2, *none, engine_kind::sim).pool.tier.config());
}

}  // namespace
}  // namespace kvc::launch
