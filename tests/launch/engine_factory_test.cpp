// The engine seam's factories and traits (launch/engines/engine.hpp, engine_traits.hpp): every
// name makes its engine, an unknown name is one clear error, the traits say what the launcher
// and the role processes branch on, and each scheduler engine plans with its own block sizes.
// In one process, without a connector: what the engines do with one is the contract suite's
// (engine_contract_test.cpp).
#include "launch/engines/engine.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "launch/config/config_loader.hpp"
#include "launch/config/launch_plan.hpp"
#include "launch/roles/node_processes.hpp"

namespace kvc::launch {
namespace {

using ::testing::HasSubstr;

class EngineFactoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = load_config("topology: {tensor_parallel: 2}\n", "engines.yaml", {});
    ASSERT_TRUE(l.ok());
    config_ = l.config;
    auto p = make_plan(config_, "engine-factory", "token");
    ASSERT_TRUE(p.ok()) << p.error().to_string();
    plan_ = *p;
  }

  scheduler_process_options scheduler_options(engine_kind kind) const {
    return scheduler_options_of(config_, plan_, kind);
  }

  pool_plan pool(const scheduler_process_options& o) const {
    auto p = derive_pool(o.topology, o.pool);
    EXPECT_TRUE(p.ok());
    return *p;
  }

  engine_io io() {
    return {signals_, [](const child_event&) {}};
  }

  launch_config config_;
  launch_plan plan_;
  signal_watcher signals_;
};

TEST_F(EngineFactoryTest, TheTraitsSayWhatCallersAskAndNamesRoundTrip) {
  for (auto k : {engine_kind::serve, engine_kind::smoke, engine_kind::sim}) {
    EXPECT_EQ(traits_of(k).kind, k);
    auto back = parse_engine_kind(to_string(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
    // The options a launch maps for an engine name that engine again.
    EXPECT_EQ(scheduler_options(k).engine, k);
  }
  EXPECT_FALSE(traits_of(engine_kind::serve).launchable);
  EXPECT_FALSE(traits_of(engine_kind::serve).waits_for_steps);
  EXPECT_TRUE(traits_of(engine_kind::smoke).launchable);
  EXPECT_TRUE(traits_of(engine_kind::smoke).waits_for_steps);
  EXPECT_FALSE(traits_of(engine_kind::smoke).executor_channel);
  EXPECT_FALSE(traits_of(engine_kind::smoke).run_figures);
  EXPECT_TRUE(traits_of(engine_kind::sim).executor_channel);
  EXPECT_TRUE(traits_of(engine_kind::sim).run_figures);
  worker_process_options w;
  EXPECT_EQ(engine_of(w), engine_kind::serve);
  w.executor = "tcp://127.0.0.1:9";
  EXPECT_EQ(engine_of(w), engine_kind::sim);
}

TEST_F(EngineFactoryTest, EveryNameMakesItsEnginesAndAnUnknownNameIsOneError) {
  for (const char* name : {"serve", "smoke", "sim"}) {
    const auto o = scheduler_options(*parse_engine_kind(name));
    auto s = make_scheduler_engine(std::string{name}, o, pool(o), io());
    ASSERT_TRUE(s.ok()) << name << ": " << s.error().to_string();
    EXPECT_NE(*s, nullptr);
    auto r = make_rank_engine(std::string{name}, worker_process_options{}, io());
    ASSERT_TRUE(r.ok()) << name;
    EXPECT_NE(*r, nullptr);
  }
  const auto o = scheduler_options(engine_kind::serve);
  auto bad = make_scheduler_engine(std::string{"fast"}, o, pool(o), io());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code(), errc::invalid_argument);
  EXPECT_EQ(bad.error().message(), "--engine fast: serve, smoke or sim");
  auto bad_rank = make_rank_engine(std::string{"fast"}, worker_process_options{}, io());
  ASSERT_FALSE(bad_rank.ok());
  EXPECT_EQ(bad_rank.error().message(), "--engine fast: serve, smoke or sim");
  // The simulated engine runs on its config: without it (a scheduler started without
  // --config), one error, no engine.
  auto without = scheduler_options(engine_kind::sim);
  without.config.reset();
  auto no_config = make_scheduler_engine(engine_kind::sim, without, pool(without), io());
  ASSERT_FALSE(no_config.ok());
  EXPECT_THAT(no_config.error().message(), HasSubstr("--engine sim"));
}

// Offloading off (offload.enabled false): only an engine that runs without a connector is made;
// the others, and injected faults, are one sentence naming the key.
TEST_F(EngineFactoryTest, WithoutOffloadingOnlyTheSimulatedEngineIsMade) {
  for (auto k : {engine_kind::serve, engine_kind::smoke}) {
    auto o = scheduler_options(k);
    o.offload = false;
    auto e = make_scheduler_engine(k, o, pool(o), io());
    ASSERT_FALSE(e.ok()) << to_string(k);
    EXPECT_EQ(e.error().code(), errc::invalid_argument);
    EXPECT_THAT(e.error().message(),
                HasSubstr("offload.enabled is false: engine " + std::string{to_string(k)}));
    EXPECT_THAT(e.error().message(), HasSubstr("(without offloading: sim)"));
    EXPECT_EQ(e.error().message(), offload_problem(traits_of(k), false, false));
  }
  auto o = scheduler_options(engine_kind::sim);
  o.offload = false;
  auto sim = make_scheduler_engine(engine_kind::sim, o, pool(o), io());
  ASSERT_TRUE(sim.ok()) << sim.error().to_string();
  EXPECT_EQ(offload_problem(traits_of(engine_kind::sim), false, false), "");
  o.faults.specs = {"duplicate_report:nth=3"};
  auto faulty = make_scheduler_engine(engine_kind::sim, o, pool(o), io());
  ASSERT_FALSE(faulty.ok());
  EXPECT_THAT(faulty.error().message(), HasSubstr("runtime.faults: offload.enabled is false"));
  o.faults.specs.clear();
  o.rank_restarts = true;  // restart.policy on-failure
  auto restarting = make_scheduler_engine(engine_kind::sim, o, pool(o), io());
  ASSERT_FALSE(restarting.ok());
  EXPECT_THAT(restarting.error().message(),
              HasSubstr("topology.restart.policy: on-failure: offload.enabled is false"));
  // With offloading every engine takes faults and restarts.
  for (auto k : {engine_kind::serve, engine_kind::smoke, engine_kind::sim}) {
    EXPECT_EQ(offload_problem(traits_of(k), true, true, true), "") << to_string(k);
  }
  // The ranks of the synthetic KV cache have nothing to run without a connector.
  auto rank = make_rank_engine(engine_kind::serve, worker_process_options{}, io());
  const status st = rank->prepare_without_offload();
  EXPECT_EQ(st.code(), errc::invalid_argument);
  EXPECT_THAT(st.message(), HasSubstr("offload.enabled"));
  EXPECT_EQ(rank->run_without_offload().code(), errc::invalid_argument);
}

// `kvconnect scheduler`'s flags: --engine names the engine; --smoke-steps alone is the smoke
// run; --smoke-steps with another engine is one error. The names --engine takes come from the
// traits.
TEST_F(EngineFactoryTest, TheSchedulersFlagsPickTheEngine) {
  EXPECT_EQ(*scheduler_engine_of_flags(std::nullopt, false), engine_kind::serve);
  EXPECT_EQ(*scheduler_engine_of_flags(std::nullopt, true), engine_kind::smoke);
  EXPECT_EQ(*scheduler_engine_of_flags(std::string{"sim"}, false), engine_kind::sim);
  EXPECT_EQ(*scheduler_engine_of_flags(std::string{"smoke"}, true), engine_kind::smoke);
  auto both = scheduler_engine_of_flags(std::string{"sim"}, true);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.error().message(),
            "--smoke-steps is the smoke run's step count: --engine sim takes none");
  EXPECT_FALSE(scheduler_engine_of_flags(std::string{"fast"}, false).ok());
  EXPECT_EQ(engine_names(false), (std::vector<std::string>{"serve", "smoke", "sim"}));
  EXPECT_EQ(engine_names(true), (std::vector<std::string>{"smoke", "sim"}));
}

TEST_F(EngineFactoryTest, EachEnginePlansWithItsOwnBlockSizes) {
  for (auto k : {engine_kind::serve, engine_kind::smoke}) {
    const auto o = scheduler_options(k);
    auto e = make_scheduler_engine(k, o, pool(o), io());
    ASSERT_TRUE(e.ok());
    embed::scheduler_connector_config cfg;
    (*e)->configure(cfg);
    EXPECT_EQ(cfg.planner.gpu_block_size, 4u) << to_string(k);  // the synthetic cache's
    EXPECT_EQ(cfg.planner.offloaded_block_size, o.pool.kv.block_factor * 4u);
    auto endpoint = (*e)->open();  // nothing besides the step channel
    ASSERT_TRUE(endpoint.ok());
    EXPECT_EQ(*endpoint, "");
  }
  const auto o = scheduler_options(engine_kind::sim);
  auto sim = make_scheduler_engine(engine_kind::sim, o, pool(o), io());
  ASSERT_TRUE(sim.ok());
  embed::scheduler_connector_config cfg;
  (*sim)->configure(cfg);
  EXPECT_EQ(cfg.planner.gpu_block_size, plan_.scheduler.planner.gpu_block_size);
  EXPECT_EQ(cfg.planner.offloaded_block_size, plan_.scheduler.planner.offloaded_block_size);
  EXPECT_EQ(cfg.planner.gpu_block_size, config_.kv_cache.gpu_block_size);
}

}  // namespace
}  // namespace kvc::launch
