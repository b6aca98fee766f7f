// The plan derived from a launch config: KV geometry per rank, vLLM's pool sizing
// (cpu_bytes_to_use over all ranks), the rank → node placement, and the facade configs the
// scheduler and every rank get (checked by embed::validate).
#include "launch/launch_plan.hpp"

#include <algorithm>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launch/config_loader.hpp"
#include "launch/node_processes.hpp"
#include "launch/role_options.hpp"

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

TEST(LaunchPlanTest, TheNodesProcessesGetTheSameTopologyAndPoolFlags) {
  const auto c = loaded(tp4pp2, {"runtime.port=0", "workload.steps=30"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const std::vector<std::string> shared = {"--tp-size",
                                           "4",
                                           "--pp-size",
                                           "2",
                                           "--node",
                                           "0",
                                           "--instance",
                                           "inst",
                                           "--slots",
                                           "256",
                                           "--kv-layers",
                                           "8",
                                           "--kv-page-bytes",
                                           "16384",
                                           "--gpu-blocks",
                                           "32",
                                           "--block-factor",
                                           "2",
                                           "--heartbeat-ms",
                                           "100",
                                           "--connection-timeout-ms",
                                           "1000"};
  std::vector<std::string> want{"scheduler"};
  want.insert(want.end(), shared.begin(), shared.end());
  want.insert(want.end(), {"--host", "127.0.0.1", "--port", "0", "--job-timeout-ms", "250",
                           "--job-timeout-steps", "1000", "--ready-timeout-ms", "30000",
                           "--step-timeout-ms", "60000", "--stop-timeout-ms", "5000"});
  auto smoke = want;
  smoke.insert(smoke.end(), {"--smoke-steps", "30"});
  EXPECT_EQ(scheduler_arguments(c, *plan), smoke);
  // The simulated engine gets the whole config, without its token.
  auto sim = scheduler_arguments(c, *plan, true);
  ASSERT_EQ(sim.size(), want.size() + 2);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), sim.begin()));
  EXPECT_EQ(sim[want.size()], "--sim-engine-config");
  auto shown = c;
  shown.runtime.token.clear();
  EXPECT_EQ(sim.back(), to_yaml(shown));
  EXPECT_EQ(load_config(sim.back(), "<args>", {}).config, shown);

  want = {"worker"};
  want.insert(want.end(), shared.begin(), shared.end());
  want.insert(want.end(),
              {"--host", "127.0.0.1", "--port", "4242", "--rank", "5", "--backend", "sim",
               "--device", "5", "--register-timeout-ms", "700", "--incarnation", "0"});
  EXPECT_EQ(worker_arguments(c, *plan, 5, 4242), want);
  // A restart: the same command with the rank's next incarnation.
  want.back() = "2";
  EXPECT_EQ(worker_arguments(c, *plan, 5, 4242, 2), want);
  // on-failure: the scheduler's smoke run waits for a restarted rank.
  auto restarting = c;
  restarting.topology.restart = {"on-failure", 3};
  EXPECT_EQ(scheduler_arguments(restarting, *plan).back(), "--rank-restarts");
  restarting.topology.restart = {"on-failure", 0};
  EXPECT_EQ(scheduler_arguments(restarting, *plan).back(), "30");  // --smoke-steps
  want.back() = "0";
  want.insert(want.end(), {"--executor", "tcp://127.0.0.1:9", "--gpu-block-size", "16"});
  EXPECT_EQ(worker_arguments(c, *plan, 5, 4242, 0, "tcp://127.0.0.1:9"), want);
  // The token is never on a command line.
  for (const auto& a : worker_arguments(c, *plan, 0, 1)) EXPECT_NE(a, "secret");
}

TEST(LaunchPlanTest, ObserveReachesTheSchedulerConfigAndFlags) {
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
  const auto args = scheduler_arguments(c, *plan);
  const std::vector<std::string> tail(args.end() - 8, args.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"--metrics-port", "9400", "--kv-events-endpoint",
                                            "tcp://*:5557", "--kv-events-replay-endpoint",
                                            "tcp://*:5558", "--kv-events-topic", "kv"}));
  // Off by default: no flag at all.
  const auto off = loaded(tp4pp2);
  auto plain = make_plan(off, "inst", "secret");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->scheduler.observe.serve_metrics);
  for (const auto& a : scheduler_arguments(off, *plain)) EXPECT_FALSE(a.starts_with("--kv-events"));
}

TEST(LaunchPlanTest, EachProcessGetsTheFaultsThatConcernIt) {
  const auto c = loaded(tp4pp2, {"runtime.fault_seed=9",
                                 "runtime.faults=[\"drop_report:rank=1,p=0.5\", "
                                 "\"fail_copy:rank=5,dir=load,nth=2\", \"delay_copy:p=0.25\"]"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  auto tail = [](std::vector<std::string> args, size_t n) {
    return std::vector<std::string>(args.end() - static_cast<std::ptrdiff_t>(n), args.end());
  };
  // The scheduler injects the channel's and reports every rank's copy faults.
  EXPECT_EQ(tail(scheduler_arguments(c, *plan), 8),
            (std::vector<std::string>{"--fault-seed", "9", "--fault", "drop_report:rank=1,p=0.5",
                                      "--fault", "fail_copy:rank=5,dir=load,nth=2", "--fault",
                                      "delay_copy:p=0.25"}));
  EXPECT_EQ(
      tail(worker_arguments(c, *plan, 5, 1), 6),
      (std::vector<std::string>{"--fault-seed", "9", "--fault", "fail_copy:rank=5,dir=load,nth=2",
                                "--fault", "delay_copy:p=0.25"}));
  EXPECT_EQ(tail(worker_arguments(c, *plan, 4, 1), 4),
            (std::vector<std::string>{"--fault-seed", "9", "--fault", "delay_copy:p=0.25"}));
  const auto none = loaded(tp4pp2, {});
  auto plain = make_plan(none, "inst", "secret");
  for (const auto& a : worker_arguments(none, *plain, 0, 1)) EXPECT_NE(a, "--fault");
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

TEST(LaunchPlanTest, TheSchedulerAndEveryWorkerGetTheTiersFlags) {
  const auto c = loaded(with_tiers("[{root_dir: /tmp/kv, capacity_bytes: 1GiB, "
                                   "n_read_threads: 3, direct_io: false, io_engine: threads, "
                                   "io_depth: 8}]"),
                        {"runtime.port=0"});
  auto plan = make_plan(c, "inst", "secret");
  ASSERT_TRUE(plan.ok()) << plan.error().to_string();
  const std::string kv = plan->scheduler.file_tier->kv_description;
  const std::vector<std::string> tier = {"--tier-root-dir",    "/tmp/kv",
                                         "--tier-capacity-bytes", "1073741824",
                                         "--tier-read-threads", "3",
                                         "--tier-write-threads", "16",
                                         "--tier-max-pending",  "1024",
                                         "--tier-io-engine",    "threads",
                                         "--tier-io-depth",     "8",
                                         "--tier-kv",           kv,
                                         "--tier-no-direct-io"};
  for (const auto& args : {scheduler_arguments(c, *plan, true),
                           worker_arguments(c, *plan, 5, 5710, 0, "")}) {
    auto at = std::search(args.begin(), args.end(), tier.begin(), tier.end());
    EXPECT_NE(at, args.end()) << args[0];
  }
  // What a role makes of the flags: the plan's tier again.
  tier_options o{.root_dir = "/tmp/kv",
                 .capacity_bytes = 1ull << 30,
                 .n_read_threads = 3,
                 .no_direct_io = true,
                 .io_engine = "threads",
                 .io_depth = 8,
                 .kv_description = kv};
  ASSERT_TRUE(o.config().has_value());
  EXPECT_EQ(o.config()->kv_description, kv);
  EXPECT_FALSE(o.config()->direct_io);
  EXPECT_EQ(o.config()->n_read_threads, 3u);
  EXPECT_EQ(o.config()->io_engine, "threads");
  EXPECT_EQ(o.config()->io_depth, 8u);
  EXPECT_FALSE(tier_options{}.config().has_value());
  const auto none = make_plan(loaded(tp4pp2, {"runtime.port=0"}), "inst", "secret");
  ASSERT_TRUE(none.ok());
  const auto plain = scheduler_arguments(c, *none, true);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), "--tier-root-dir"), plain.end());
}

}  // namespace
}  // namespace kvc::launch
