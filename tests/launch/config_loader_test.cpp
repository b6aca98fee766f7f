// The launch config loader: defaults, precedence (--set > file > defaults), every error class
// with its file, line and key path, "did you mean", all errors reported at once, the YAML
// printed by to_yaml reading back as the same config, and the example files.
#include "launch/config/config_loader.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kvc::launch {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

loaded_config load(const std::string& text, std::vector<std::string> overrides = {}) {
  return load_config(text, "tp4.yaml", overrides);
}

/// Every error as "location: key_path: message".
std::vector<std::string> errors_of(const loaded_config& l) {
  std::vector<std::string> out;
  for (const auto& e : l.errors) out.push_back(e.to_string());
  return out;
}

TEST(ConfigLoaderTest, EmptyTextGivesTheEmbeddedDefaultWithEveryDefaultResolved) {
  auto l = load("");
  ASSERT_TRUE(l.ok()) << ::testing::PrintToString(errors_of(l));
  const auto& c = l.config;
  ASSERT_EQ(c.topology.nodes.size(), 1u);
  EXPECT_EQ(c.topology.nodes[0].name, "node0");
  EXPECT_EQ(c.topology.nodes[0].host, "127.0.0.1");
  EXPECT_EQ(c.topology.tensor_parallel, 2u);
  EXPECT_EQ(c.topology.pipeline_parallel, 1u);
  EXPECT_EQ(c.topology.backend, "sim");
  EXPECT_EQ(c.topology.restart.policy, "never");
  EXPECT_EQ(c.topology.restart.limit, 3u);
  EXPECT_THAT(c.topology.placement, ElementsAre("node0", "node0"));  // filled in order
  EXPECT_EQ(c.kv_cache.gpu_block_size, 16u);
  EXPECT_TRUE(c.kv_cache.enable_prefix_caching);  // vLLM's default
  EXPECT_EQ(c.offload.block_size, 16u);  // vLLM: the GPU block size
  EXPECT_EQ(c.offload.eviction_policy, "lru");
  EXPECT_EQ(c.offload.store_threshold, 0u);
  EXPECT_EQ(c.offload.max_tracker_size, 64000u);
  EXPECT_EQ(c.runtime.port, 0u);
  EXPECT_EQ(c.runtime.token, "");
  EXPECT_EQ(c.workload.steps, 200u);
  EXPECT_EQ(c.workload.drain_steps, 1000u);
  // Only the two resolved fields differ from a default-constructed config.
  launch_config expected;
  expected.topology.placement = {"node0", "node0"};
  expected.offload.block_size = 16;
  EXPECT_EQ(c, expected);
}

TEST(ConfigLoaderTest, SetBeatsTheFileAndTheFileBeatsTheDefaults) {
  const std::string file =
      "topology:\n"
      "  tensor_parallel: 4\n"
      "offload:\n"
      "  eviction_policy: arc\n"
      "  cpu_bytes_to_use: 1GiB\n";
  auto from_file = load(file);
  ASSERT_TRUE(from_file.ok()) << ::testing::PrintToString(errors_of(from_file));
  EXPECT_EQ(from_file.config.topology.tensor_parallel, 4u);
  EXPECT_EQ(from_file.config.offload.cpu_bytes_to_use, 1ull << 30);
  EXPECT_EQ(from_file.config.kv_cache.layers, 8u);  // default

  auto with_set = load(file, {"topology.tensor_parallel=8", "offload.eviction_policy=lru",
                              "offload.eviction_policy=arc", "kv_cache.layers=16"});
  ASSERT_TRUE(with_set.ok()) << ::testing::PrintToString(errors_of(with_set));
  EXPECT_EQ(with_set.config.topology.tensor_parallel, 8u);
  EXPECT_EQ(with_set.config.topology.placement.size(), 8u);
  EXPECT_EQ(with_set.config.offload.eviction_policy, "arc");  // the later --set wins
  EXPECT_EQ(with_set.config.kv_cache.layers, 16u);            // a section the file lacks
}

TEST(ConfigLoaderTest, SetReachesIntoListsAndTakesYamlValues) {
  auto l = load("", {"topology.nodes=[{name: a}, {name: b}]", "topology.nodes[1].host=10.0.0.2",
                     "topology.nodes.0.shm_bytes=1GiB", "topology.tensor_parallel=4"});
  ASSERT_TRUE(l.ok()) << ::testing::PrintToString(errors_of(l));
  ASSERT_EQ(l.config.topology.nodes.size(), 2u);
  EXPECT_EQ(l.config.topology.nodes[0].shm_bytes, 1ull << 30);
  EXPECT_EQ(l.config.topology.nodes[1].host, "10.0.0.2");
  EXPECT_THAT(l.config.topology.placement, ElementsAre("a", "a", "b", "b"));
}

TEST(ConfigLoaderTest, UnknownKeysAreNamedWithLineAndASuggestion) {
  auto l = load(
      "topology:\n"
      "  tensor_paralel: 4\n"
      "offlaod:\n"
      "  block_size: 16\n"
      "runtime:\n"
      "  zzz: 1\n");
  EXPECT_THAT(errors_of(l),
              ElementsAre("tp4.yaml:2: topology.tensor_paralel: unknown key \"tensor_paralel\"; "
                          "did you mean \"tensor_parallel\"?",
                          "tp4.yaml:3: offlaod: unknown key \"offlaod\"; did you mean "
                          "\"offload\"?",
                          HasSubstr("tp4.yaml:6: runtime.zzz: unknown key \"zzz\" (known: host, "
                                    "port, executor_port, token")));
}

TEST(ConfigLoaderTest, DuplicateKeysAreRefusedNamingBothPlaces) {
  // yaml-cpp keeps both entries of a repeated key: read in turn, the second would silently win
  // (TP=4 here), also over a --set of the same key.
  auto l = load(
      "topology:\n"
      "  tensor_parallel: 2\n"
      "  nodes:\n"
      "    - name: a\n"
      "      host: h\n"
      "      name: b\n"
      "  tensor_parallel: 4\n"
      "offload: {enabled: true, enabled: false}\n"
      "topology:\n"
      "  pipeline_parallel: 2\n",
      {"topology.tensor_parallel=8"});
  EXPECT_THAT(errors_of(l),
              ElementsAre("tp4.yaml:6: topology.nodes[0].name: duplicate key \"name\": first at "
                          "tp4.yaml:4:7, again at tp4.yaml:6:7 (a key may appear once in a map)",
                          "tp4.yaml:7: topology.tensor_parallel: duplicate key "
                          "\"tensor_parallel\": first at tp4.yaml:2:3, again at tp4.yaml:7:3 (a "
                          "key may appear once in a map)",
                          "tp4.yaml:8: offload.enabled: duplicate key \"enabled\": first at "
                          "tp4.yaml:8:11, again at tp4.yaml:8:26 (a key may appear once in a map)",
                          "tp4.yaml:9: topology: duplicate key \"topology\": first at "
                          "tp4.yaml:1:1, again at tp4.yaml:9:1 (a key may appear once in a map)"));
  // The same keys once each load.
  EXPECT_TRUE(load("topology:\n  tensor_parallel: 2\nkv_cache:\n  layers: 2\n").ok());
}

TEST(ConfigLoaderTest, ATextOverTheSizeLimitIsRefusedBeforeParsing) {
  std::string text = "# " + std::string(max_config_bytes - 3, 'x') + "\n";
  ASSERT_EQ(text.size(), max_config_bytes);
  EXPECT_TRUE(load(text).ok());  // a comment of exactly the limit loads: the defaults
  text += "\n";
  EXPECT_THAT(errors_of(load(text)),
              ElementsAre("tp4.yaml: holds 1048577 bytes: a config is at most 1048576 bytes "
                          "(1 MiB)"));
}

TEST(ConfigLoaderTest, EveryUnknownKeyOfALargeFileIsNamedOnce) {
  // 20,000 unknown keys, and one long one (an explicit key: a plain one ends at 1,024 chars):
  // one error each, in file order. The suggestion skips a name whose length alone rules it out,
  // so a pasted blob costs no edit distance.
  std::string text;
  const size_t keys = 20'000;
  for (size_t i = 0; i < keys; ++i) text += "k" + std::to_string(i) + ": 1\n";
  text += "? " + std::string(100'000, 'y') + "\n: 1\n";
  auto l = load(text);
  ASSERT_EQ(l.errors.size(), keys + 1);
  EXPECT_EQ(l.errors.front().to_string(),
            "tp4.yaml:1: k0: unknown key \"k0\" (known: topology, kv_cache, offload, runtime, "
            "workload, observe)");
  EXPECT_EQ(l.errors[keys - 1].line, static_cast<int>(keys));
  EXPECT_EQ(l.errors.back().line, static_cast<int>(keys + 1));
  EXPECT_EQ(closest_name(std::string(100'000, 'y'), std::vector<std::string_view>{"topology"}), "");
}

TEST(ConfigLoaderTest, WrongTypesAreNamed) {
  auto l = load(
      "topology:\n"
      "  nodes: node0\n"
      "  tensor_parallel: four\n"
      "kv_cache: 16\n"
      "offload:\n"
      "  enabled: maybe\n"
      "  cpu_bytes_to_use: 8GB\n"
      "workload:\n"
      "  zipf: steep\n");
  EXPECT_THAT(errors_of(l),
              ElementsAre(HasSubstr("tp4.yaml:2: topology.nodes: expected a non-empty list of "
                                    "nodes"),
                          "tp4.yaml:3: topology.tensor_parallel: \"four\" is not an unsigned "
                          "integer",
                          HasSubstr("tp4.yaml:4: kv_cache: expected a map with keys layers, "),
                          "tp4.yaml:6: offload.enabled: \"maybe\" is not true or false",
                          "tp4.yaml:7: offload.cpu_bytes_to_use: \"8GB\" is not a byte count (an "
                          "integer, or one with a KiB, MiB, GiB or TiB suffix)",
                          "tp4.yaml:9: workload.zipf: \"steep\" is not a number"));
}

TEST(ConfigLoaderTest, ValuesOutOfRangeAreNamed) {
  auto l = load(
      "topology:\n"
      "  tensor_parallel: 0\n"
      "  backend: cdua\n"
      "offload:\n"
      "  eviction_policy: lfu\n"
      "  store_threshold: 1\n"
      "runtime:\n"
      "  port: 70000\n"
      "  instance: a/b\n"
      "workload:\n"
      "  multi_turn: {probability: 1.5}\n");
  EXPECT_THAT(
      errors_of(l),
      ElementsAre("tp4.yaml:2: topology.tensor_parallel: 0 is out of range: must be in [1, 256]",
                  "tp4.yaml:3: topology.backend: \"cdua\" is not one of sim, cuda; did you mean "
                  "\"cuda\"?",
                  "tp4.yaml:5: offload.eviction_policy: \"lfu\" is not one of lru, arc; did you "
                  "mean \"lru\"?",
                  "tp4.yaml:6: offload.store_threshold: 1 is out of range: must be 0 (reuse "
                  "filter off) or >= 2",
                  "tp4.yaml:8: runtime.port: 70000 is out of range: must be in [0, 65535]",
                  "tp4.yaml:9: runtime.instance: \"a/b\" may only hold letters, digits, '-', '_' "
                  "and '.'",
                  "tp4.yaml:11: workload.multi_turn.probability: 1.5 is out of range: must be in "
                  "[0, 1]"));
}

TEST(ConfigLoaderTest, ImpossibleGeometryIsNamedAtTheKeyToChange) {
  auto block = load(
      "kv_cache:\n"
      "  gpu_block_size: 16\n"
      "offload:\n"
      "  block_size: 24\n");
  EXPECT_THAT(errors_of(block),
              ElementsAre("tp4.yaml:4: offload.block_size: 24 tokens is not a multiple of "
                          "kv_cache.gpu_block_size 16"));

  // Default KV shape, TP=2: one offloaded block is 8 layers x 2 x 16 x 4 x 64 x 2 = 128 KiB
  // on each rank.
  auto pool = load("offload:\n  cpu_bytes_to_use: 200KiB\n");
  EXPECT_THAT(errors_of(pool),
              ElementsAre("tp4.yaml:2: offload.cpu_bytes_to_use: 204800 bytes hold no offloaded "
                          "block per rank: one block takes 131072 bytes on each of 2 ranks "
                          "(needs >= 262144)"));

  auto placed = load(
      "topology:\n"
      "  nodes: [{name: a}, {name: b}]\n"
      "  tensor_parallel: 4\n"
      "  placement: [a, a, a]\n");
  EXPECT_THAT(errors_of(placed),
              ElementsAre("tp4.yaml:2: topology.nodes[1]: node \"b\" has no rank (4 ranks over "
                          "2 nodes)",
                          "tp4.yaml:4: topology.placement: places 3 ranks, but tensor_parallel x "
                          "pipeline_parallel = 4 x 1 = 4"));

  auto unknown_node = load(
      "topology:\n"
      "  nodes: [{name: a}]\n"
      "  placement: [a, c]\n");
  EXPECT_THAT(errors_of(unknown_node),
              ElementsAre("tp4.yaml:3: topology.placement[1]: \"c\" is not a node of "
                          "topology.nodes"));

  auto shm = load("topology:\n  nodes: [{name: a, shm_bytes: 32MiB}]\n");
  EXPECT_THAT(errors_of(shm), ElementsAre(HasSubstr("tp4.yaml:2: topology.nodes[0].shm_bytes: "
                                                    "the node's segment takes 270532608 bytes")));
}

TEST(ConfigLoaderTest, CrossKeyProblemsNameWhereTheValueCameFrom) {
  // From --set; 4 GPU blocks cannot hold the smoke run's source and destination groups of 2 blocks
  // each.
  // They cannot hold the simulated engine's longest request either.
  auto l = load("offload:\n  block_size: 32\n", {"kv_cache.gpu_blocks=4"});
  EXPECT_THAT(errors_of(l), ElementsAre("--set: kv_cache.gpu_blocks: 4 GPU blocks are too few "
                                        "for the smoke run: needs >= 2 x (offload.block_size / "
                                        "kv_cache.gpu_block_size) + 1 = 5",
                                        "--set: kv_cache.gpu_blocks: 4 GPU blocks of 16 tokens "
                                        "hold 48 tokens (block 0 is the null block), fewer than "
                                        "the longest request: workload.prompt_tokens.max + "
                                        "workload.output_tokens.max = 832"));
  auto d = load("kv_cache:\n  kv_heads: 3\n");
  EXPECT_THAT(errors_of(d), ElementsAre("tp4.yaml:2: kv_cache.kv_heads: 3 heads cannot be split "
                                        "over tensor_parallel 2 ranks (one must divide the "
                                        "other)"));
  auto layers = load("kv_cache:\n  layers: 1\n", {"topology.pipeline_parallel=2"});
  EXPECT_THAT(errors_of(layers), ElementsAre("tp4.yaml:2: kv_cache.layers: 1 layers are fewer "
                                             "than pipeline_parallel 2 stages"));
  auto dflt = load("workload:\n  prompt_tokens: {max: 32}\n");
  EXPECT_THAT(errors_of(dflt),
              ElementsAre("tp4.yaml:2: workload.prompt_tokens: min 64 > max 32",
                          "tp4.yaml: workload.shared_prefix_tokens.max: 512 tokens exceed "
                          "workload.prompt_tokens.max 32"));
}

TEST(ConfigLoaderTest, EveryErrorIsReportedInFileOrderAndSetErrorsLast) {
  auto l = load(
      "workload:\n"
      "  steps: 0\n"
      "topology:\n"
      "  tensor_parallel: x\n",
      {"runtime.prot=5", "nonsense", "topology.tensor_parallel.deeper=1"});
  EXPECT_THAT(errors_of(l),
              ElementsAre("tp4.yaml:2: workload.steps: 0 is out of range: must be >= 1",
                          "tp4.yaml:4: topology.tensor_parallel: \"x\" is not an unsigned integer",
                          "--set: runtime.prot: unknown key \"prot\"; did you mean \"port\"?",
                          "--set: \"nonsense\" is not key.path=value",
                          "--set: topology.tensor_parallel.deeper: topology.tensor_parallel is a "
                          "value, not a map"));
  EXPECT_FALSE(l.ok());
}

TEST(ConfigLoaderTest, ASyntaxErrorNamesItsLine) {
  auto l = load("topology:\n  tensor_parallel: 2\n  nodes: [a, b\n");
  ASSERT_EQ(l.errors.size(), 1u);
  EXPECT_EQ(l.errors[0].location.substr(0, 9), "tp4.yaml:");
  EXPECT_GT(l.errors[0].line, 2);
  EXPECT_THAT(l.errors[0].message, HasSubstr("not valid YAML"));
  auto scalar = load("just a string\n");
  EXPECT_THAT(errors_of(scalar), ElementsAre(HasSubstr("tp4.yaml:1: expected a map of sections")));
}

TEST(ConfigLoaderTest, PrefixCachingIsTrueOrFalse) {
  auto off = load("kv_cache:\n  enable_prefix_caching: false\n");
  ASSERT_TRUE(off.ok()) << ::testing::PrintToString(errors_of(off));
  EXPECT_FALSE(off.config.kv_cache.enable_prefix_caching);
  EXPECT_THAT(errors_of(load("kv_cache:\n  enable_prefix_caching: sometimes\n")),
              ElementsAre("tp4.yaml:2: kv_cache.enable_prefix_caching: \"sometimes\" is not "
                          "true or false"));
}

TEST(ConfigLoaderTest, ToYamlReadsBackAsTheSameConfig) {
  auto base = load(
      "topology:\n"
      "  nodes: [{name: a, host: h1, shm_bytes: 1GiB}, {name: b, host: h2}]\n"
      "  tensor_parallel: 4\n"
      "  pipeline_parallel: 2\n"
      "  restart: {policy: on-failure, limit: 5}\n"
      "kv_cache: {enable_prefix_caching: false}\n"
      "offload: {block_size: 32, eviction_policy: arc, store_threshold: 2}\n"
      "runtime: {token: \"0123\", instance: demo, log_level: debug, fault_seed: 4,\n"
      "  faults: [\"drop_report:rank=1,p=0.05\", \"kill_rank:rank=2,step=300\"]}\n"
      "workload: {zipf: 0.9, arrival_rate: 2.5, seed: 18446744073709551615, drain_steps: 0}\n"
      "observe: {trace: jobs, trace_dir: /tmp/traces}\n");
  ASSERT_TRUE(base.ok()) << ::testing::PrintToString(errors_of(base));
  const std::string yaml = to_yaml(base.config);
  auto again = load_config(yaml, "shown.yaml", {});
  ASSERT_TRUE(again.ok()) << yaml << ::testing::PrintToString(errors_of(again));
  EXPECT_EQ(again.config, base.config) << yaml;
  EXPECT_EQ(to_yaml(again.config), yaml);
  EXPECT_THAT(yaml, HasSubstr("token: \"0123\""));  // a string stays a string
  EXPECT_THAT(yaml, HasSubstr("enable_prefix_caching: false"));
  EXPECT_THAT(yaml, HasSubstr("drain_steps: 0"));
}

TEST(ConfigLoaderTest, ObserveSectionIsReadAndChecked) {
  auto l = load(
      "observe:\n  metrics_port: 9400\n  kv_events:\n    endpoint: tcp://*:5557\n"
      "    replay_endpoint: tcp://*:5558\n    topic: kv\n");
  ASSERT_TRUE(l.ok()) << ::testing::PrintToString(errors_of(l));
  EXPECT_EQ(l.config.observe.metrics_port, 9400u);
  EXPECT_EQ(l.config.observe.kv_events.endpoint, "tcp://*:5557");
  EXPECT_EQ(l.config.observe.kv_events.replay_endpoint, "tcp://*:5558");
  EXPECT_EQ(l.config.observe.kv_events.topic, "kv");
  auto again = load(to_yaml(l.config));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.config.observe, l.config.observe);

  EXPECT_THAT(errors_of(load("observe:\n  metrics_port: 70000\n")),
              ElementsAre(HasSubstr("tp4.yaml:2: observe.metrics_port:")));
  EXPECT_THAT(errors_of(load("observe:\n  kv_event: {}\n")),
              ElementsAre(HasSubstr("did you mean \"kv_events\"?")));
  EXPECT_THAT(errors_of(load("", {"observe.kv_events.replay_endpoint=tcp://*:5558"})),
              ElementsAre("--set: observe.kv_events.replay_endpoint: needs "
                          "observe.kv_events.endpoint"));
  EXPECT_THAT(errors_of(load("runtime:\n  port: 9400\nobserve:\n  metrics_port: 9400\n")),
              ElementsAre("tp4.yaml:4: observe.metrics_port: port 9400 is runtime.port as well"));
}

TEST(ConfigLoaderTest, TheExecutorPortIsDerivedFromAFixedPortAndChecked) {
  auto d = load("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.config.runtime.executor_port, 0u);
  EXPECT_EQ(executor_port_of(d.config.runtime), 0);  // a free port
  auto fixed = load("runtime:\n  port: 9400\n");
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ(executor_port_of(fixed.config.runtime), 9401);
  auto own = load("runtime:\n  port: 9400\n  executor_port: 9500\n");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(executor_port_of(own.config.runtime), 9500);
  EXPECT_EQ(load(to_yaml(own.config)).config.runtime, own.config.runtime);

  EXPECT_THAT(errors_of(load("runtime:\n  port: 9400\n  executor_port: 9400\n")),
              ElementsAre("tp4.yaml:3: runtime.executor_port: port 9400, which is runtime.port "
                          "as well"));
  EXPECT_THAT(errors_of(load("runtime:\n  port: 9400\nobserve:\n  metrics_port: 9401\n")),
              ElementsAre(HasSubstr("runtime.executor_port: 0 derives runtime.port + 1 = 9401, "
                                    "which is observe.metrics_port")));
  EXPECT_THAT(errors_of(load("runtime:\n  port: 65535\n")),
              ElementsAre(HasSubstr("runtime.executor_port: 0 derives runtime.port + 1, beyond "
                                    "65535")));
  EXPECT_THAT(errors_of(load("runtime:\n  executor_port: 70000\n")),
              ElementsAre(HasSubstr("tp4.yaml:2: runtime.executor_port:")));
}

TEST(ConfigLoaderTest, DeadlinesAreOnByDefaultAndFaultSpecsAreChecked) {
  auto d = load("");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.config.runtime.job_timeout_ms, 30000u);
  EXPECT_EQ(d.config.runtime.job_timeout_steps, 1000u);
  EXPECT_EQ(d.config.runtime.progress_interval_ms, 5000u);
  EXPECT_TRUE(d.config.runtime.faults.empty());
  auto bad = load(
      "runtime:\n"
      "  faults:\n"
      "    - drop_report:rank=1,p=0.05\n"
      "    - drop_reprot:p=1\n"
      "    - fail_copy:dri=load,p=1\n",
      {"runtime.fault_seed=x"});
  EXPECT_THAT(errors_of(bad),
              ElementsAre(HasSubstr("tp4.yaml:4: runtime.faults[1]: fault \"drop_reprot:p=1\": "
                                    "unknown kind \"drop_reprot\""),
                          AllOf(HasSubstr("tp4.yaml:5: runtime.faults[2]"),
                                HasSubstr("did you mean \"dir\"?")),
                          HasSubstr("--set: runtime.fault_seed")));
  EXPECT_THAT(errors_of(load("runtime: {faults: drop_report}\n")),
              ElementsAre(HasSubstr("expected a list of fault specs")));
}

TEST(ConfigLoaderTest, ObserveTakesATraceLevelAndNeedsADirectoryForIt) {
  auto dflt = load("");
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt.config.observe.trace, "off");
  auto on = load("observe:\n  trace: messages\n  trace_dir: traces\n");
  ASSERT_TRUE(on.ok()) << ::testing::PrintToString(errors_of(on));
  EXPECT_EQ(on.config.observe.trace, "messages");
  EXPECT_EQ(on.config.observe.trace_dir, "traces");
  auto bad = load("observe:\n  trace: all\n", {"observe.trace_dri=x"});
  EXPECT_THAT(errors_of(bad), ElementsAre(HasSubstr("tp4.yaml:2: observe.trace:"),
                                          HasSubstr("did you mean \"trace_dir\"")));
  auto no_dir = load("observe:\n  trace: jobs\n");
  EXPECT_THAT(errors_of(no_dir),
              ElementsAre(HasSubstr("observe.trace_dir: observe.trace is jobs: a directory")));
}

TEST(ConfigLoaderTest, EditDistanceAndSuggestions) {
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("port", "port"), 0u);
  const std::vector<std::string_view> keys = {"tensor_parallel", "pipeline_parallel", "nodes"};
  EXPECT_EQ(closest_name("tensor_paralel", keys), "tensor_parallel");
  EXPECT_EQ(closest_name("pipeline_paralell", keys), "pipeline_parallel");
  EXPECT_EQ(closest_name("node", keys), "nodes");
  EXPECT_EQ(closest_name("Tensor_Parallel", keys), "tensor_parallel");
  EXPECT_EQ(closest_name("backend", keys), "");  // nothing close: no suggestion
}

TEST(ConfigLoaderTest, EveryExampleLoads) {
  for (const char* name : {"tp2.yaml", "tp4pp2.yaml", "two-nodes.yaml", "no-offload.yaml"}) {
    const std::string path = std::string(KVC_SOURCE_DIR) + "/launch/examples/" + name;
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream text;
    text << in.rdbuf();
    auto l = load_config(text.str(), name, {});
    EXPECT_TRUE(l.ok()) << name << ": " << ::testing::PrintToString(errors_of(l));
  }
}

TEST(ConfigLoaderTest, SecondaryTiersReadWithVllmKeysAndDefaults) {
  auto l = load(
      "offload:\n"
      "  secondary_tiers:\n"
      "    - type: fs\n"
      "      root_dir: /mnt/kv\n"
      "      capacity_bytes: 64GiB\n"
      "      n_read_threads: 8\n"
      "    - {root_dir: /mnt/kv2, capacity_bytes: 4096, direct_io: false,\n"
      "       max_pending_cascades: 16, n_write_threads: 2, io_engine: threads, io_depth: 32}\n");
  ASSERT_TRUE(l.ok()) << errors_of(l).front();
  const auto& t = l.config.offload.secondary_tiers;
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], (secondary_tier_config{.type = "fs", .root_dir = "/mnt/kv",
                                         .capacity_bytes = 64ULL << 30, .n_read_threads = 8}));
  EXPECT_EQ(t[1], (secondary_tier_config{.root_dir = "/mnt/kv2", .capacity_bytes = 4096,
                                         .n_write_threads = 2, .max_pending_cascades = 16,
                                         .direct_io = false, .io_engine = "threads",
                                         .io_depth = 32}));
  EXPECT_EQ(t[0].io_engine, "auto");  // io_uring where the kernel allows it
  EXPECT_EQ(t[0].io_depth, 4u);
  EXPECT_TRUE(load("").config.offload.secondary_tiers.empty());  // no tier by default
  // The printed config reads back as the same tiers.
  EXPECT_EQ(load(to_yaml(l.config)).config.offload.secondary_tiers, t);
}

TEST(ConfigLoaderTest, SecondaryTierErrorsAreNamedWithASuggestion) {
  auto l = load(
      "offload:\n"
      "  secondary_tiers:\n"
      "    - type: fss\n"
      "      root_dri: /mnt/kv\n"
      "      capacity_bytes: 0\n"
      "      n_read_threads: 0\n"
      "  eviction_policy: lru\n");
  EXPECT_THAT(errors_of(l),
              ElementsAre("tp4.yaml:3: offload.secondary_tiers[0].type: \"fss\" is not one of fs; "
                          "did you mean \"fs\"?",
                          "tp4.yaml:3: offload.secondary_tiers[0].root_dir: missing: the "
                          "directory of the tier's files",
                          "tp4.yaml:4: offload.secondary_tiers[0].root_dri: unknown key "
                          "\"root_dri\"; did you mean \"root_dir\"?",
                          "tp4.yaml:5: offload.secondary_tiers[0].capacity_bytes: 0 is out of "
                          "range: must be >= 1",
                          "tp4.yaml:6: offload.secondary_tiers[0].n_read_threads: 0 is out of "
                          "range: must be in [1, 1024]"));  // in file order
  EXPECT_THAT(errors_of(load("offload:\n  secondary_tiers:\n"
                             "    - {root_dir: /x, capacity_bytes: 1, io_engine: io_urng,\n"
                             "       io_depth: 0}\n")),
              ElementsAre("tp4.yaml:3: offload.secondary_tiers[0].io_engine: \"io_urng\" is not "
                          "one of auto, io_uring, threads; did you mean \"io_uring\"?",
                          "tp4.yaml:4: offload.secondary_tiers[0].io_depth: 0 is out of range: "
                          "must be in [1, 4096]"));
  EXPECT_THAT(errors_of(load("offload:\n  secondary_tiers: /mnt/kv\n")),
              ElementsAre(HasSubstr("tp4.yaml:2: offload.secondary_tiers: expected a list of "
                                    "tiers")));
  EXPECT_THAT(errors_of(load("", {"offload.secondary_tiers=[{root_dir: /x}]"})),
              ElementsAre("--set: offload.secondary_tiers[0].capacity_bytes: missing: the bytes "
                          "the tier's files may take"));
}

}  // namespace
}  // namespace kvc::launch
