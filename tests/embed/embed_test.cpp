// The embedding facades with real actors in one process: a scheduler_connector hosting the
// scheduler actor and the coordinator, worker_connectors registered in process (and one over
// loopback TCP), the deterministic manual copy engine. The test thread plays the engine: it makes
// the scheduler-side calls, then each worker's calls in vLLM's order, and runs each step's copies
// during its "forward" (manual_copy_engine::advance_all), so every transfer completes in a known
// step: the steps are counted, not waited for. Waits are on messages with deadlines (a step's
// output, the next metadata, a registration), never sleeps.
#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <msgpack.hpp>
#include <zmq_addon.hpp>
#include <unistd.h>

#include "actors/coordinator/step_coordinator.hpp"
#include "actors/record/record_reader.hpp"
#include "actors/record/replayer.hpp"
#include "cuda/faulty_copy_engine.hpp"
#include "cuda/manual_copy_engine.hpp"
#include "tests/embed/kv_pattern.hpp"
#include "proto/fault_spec_parser.hpp"
#include "shm/segment.hpp"
#include "tests/shm/shm_fixture.hpp"
#include "tests/support/loopback_socket.hpp"

namespace kvc::embed {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t bs = 4;  // tokens per GPU block; offloaded block = GPU block (factor 1)
constexpr uint32_t token_bytes = 8;
constexpr uint64_t page = uint64_t{bs} * token_bytes;
constexpr uint32_t num_blocks = 16;
constexpr uint32_t slots = 8;

/// The bytes the test's "forward" writes into GPU block b of rank r for request tag t.
std::vector<std::byte> pattern(uint64_t t, rank_id r, gpu_block b) {
  return test::kv_pattern(t, r, b, page);
}

struct rank_kv {
  std::unique_ptr<worker_connector> wc;
  cuda::device_buffer buf;

  std::byte* block(gpu_block b) const { return static_cast<std::byte*>(buf.data) + b * page; }
  /// The rank's manual engine, under the faulty decorator when the rank has copy faults.
  cuda::manual_copy_engine& engine() const {
    cuda::copy_engine* e = &wc->copy_engine();
    if (auto* faulty = dynamic_cast<cuda::faulty_copy_engine*>(e)) e = &faulty->target();
    return dynamic_cast<cuda::manual_copy_engine&>(*e);
  }
  std::vector<std::byte> read(gpu_block b) const {
    std::vector<std::byte> out(page);
    EXPECT_TRUE(wc->copy_engine().download(out.data(), block(b), page).ok());
    return out;
  }
};

/// Every test runs over both step-channel transports of one process: ZeroMQ inproc and the
/// in-process memory queues.
class EmbedTest : public shm::testing::ShmTest,
                  public ::testing::WithParamInterface<step_transport> {
 protected:
  scheduler_connector_config sched_cfg(uint32_t tp) const {
    scheduler_connector_config c;
    c.transport = GetParam();
    c.listen = false;
    c.token = "secret";
    c.topology.tp_size = tp;
    c.pool = {.instance = instance_, .slots_per_rank = slots, .slot_bytes = page};
    c.planner.gpu_block_size = bs;
    return c;
  }

  /// Rank 0 of 1 in connect mode with a fixed port that may create the node's segment (a rank
  /// on another node than its scheduler side, built first).
  worker_connector_config fixed_port_worker(uint16_t port) const {
    auto c = worker_cfg(0, 1);
    c.mode = connection_mode::connect;
    c.network.port = port;
    c.pool.create_or_attach = true;
    return c;
  }

  worker_connector_config worker_cfg(rank_id r, uint32_t tp) const {
    worker_connector_config c;
    c.mode = connection_mode::in_process;
    c.token = "secret";
    c.topology.tp_size = tp;
    c.pool = {.instance = instance_, .slots_per_rank = slots, .slot_bytes = page};
    c.rank = r;
    c.register_timeout = 5s;
    c.make_copy_engine = []() -> result<std::unique_ptr<cuda::copy_engine>> {
      return std::unique_ptr<cuda::copy_engine>{new cuda::manual_copy_engine()};
    };
    return c;
  }

  /// TP=2: rank 0 as worker_cfg gives it, rank 1 with the fault `spec`; waits for both.
  ::testing::AssertionResult add_tp2_workers_rank1_faulty(scheduler_connector* sc,
                                                          const std::string& spec) {
    if (auto r = add_worker(sc, worker_cfg(0, 2)); !r) return r;
    worker_connector_config faulty = worker_cfg(1, 2);
    auto parsed = parse_fault_spec(spec);
    if (!parsed) return ::testing::AssertionFailure() << parsed.error().to_string();
    faulty.faults.specs.push_back(*parsed);
    if (auto r = add_worker(sc, faulty); !r) return r;
    if (auto st = sc->wait_for_workers(std::chrono::seconds(5)); !st) {
      return ::testing::AssertionFailure() << st.to_string();
    }
    return ::testing::AssertionSuccess();
  }

  /// Creates the worker, allocates and registers its KV cache: (blocks, bs, token_bytes) bytes.
  /// `in_background`: the rank registers after its KV cache, from a thread of its own
  /// (register_in_background), as vLLM's workers built before their scheduler do.
  ::testing::AssertionResult add_worker(scheduler_connector* sc, const worker_connector_config& c,
                                        bool in_background = false) {
    auto w = in_background ? worker_connector::prepare(c, sc) : worker_connector::create(c, sc);
    if (!w) return ::testing::AssertionFailure() << w.error().to_string();
    auto buf = (*w)->copy_engine().allocate_device(num_blocks * page);
    if (!buf) return ::testing::AssertionFailure() << buf.error().to_string();
    const cuda::kv_tensor_desc desc{reinterpret_cast<uintptr_t>(buf->data),
                                    {num_blocks, bs, token_bytes},
                                    {static_cast<int64_t>(page), token_bytes, 1},
                                    1,
                                    0};
    if (auto st = (*w)->register_kv_caches({&desc, 1}); !st) {
      return ::testing::AssertionFailure() << st.to_string();
    }
    if (in_background) {
      if (auto st = (*w)->register_in_background(); !st) {
        return ::testing::AssertionFailure() << st.to_string();
      }
    }
    ranks_.push_back({std::move(w).value(), *buf});
    return ::testing::AssertionSuccess();
  }

  /// One engine step: plan, every worker's calls around a forward that writes `writes` (block
  /// -> request tag), then the step's output (waited for up to `wait`).
  result<connector_update> step(scheduler_connector& sc, step_id s,
                                std::vector<scheduler::scheduled_request> fresh = {},
                                std::vector<std::pair<gpu_block, uint64_t>> writes = {},
                                std::chrono::nanoseconds wait = 5s) {
    auto load_errors = run_workers(sc, s, std::move(fresh), std::move(writes));
    if (!load_errors) return load_errors.error();
    if (!load_errors->empty()) return make_error(errc::device_error, "load errors");
    return sc.update_connector_output(s, wait);
  }

  /// The step up to its output: plan, then every worker's calls (their reports go out). Returns
  /// the GPU blocks the workers report load errors for. The ranks in `hold` run no copy during
  /// the forward; `finished`, when given, gets every rank's get_finished.
  result<std::vector<gpu_block>> run_workers(
      scheduler_connector& sc, step_id s, std::vector<scheduler::scheduled_request> fresh = {},
      std::vector<std::pair<gpu_block, uint64_t>> writes = {},
      const std::vector<rank_id>& hold = {}, std::vector<finished_requests>* finished = nullptr) {
    auto meta = sc.build_connector_meta({s, fresh, {}, {}});
    if (!meta) return meta.error();
    last_meta_ = *meta;
    std::vector<gpu_block> load_errors;
    if (finished != nullptr) finished->clear();
    for (auto& rk : ranks_) {
      worker_connector& w = *rk.wc;
      if (auto st = w.bind_connector_metadata(s, 5s); !st) return st;
      if (auto st = w.handle_preemptions(); !st) return st;
      if (auto st = w.start_load_kv(); !st) return st;
      if (std::find(hold.begin(), hold.end(), w.rank()) == hold.end()) {
        rk.engine().advance_all();  // the copies run during the forward
      }
      for (auto [b, tag] : writes) {
        const auto bytes = pattern(tag, w.rank(), b);
        if (auto st = w.copy_engine().upload(rk.block(b), bytes.data(), page); !st) return st;
      }
      if (auto st = w.wait_for_save(); !st) return st;
      auto done = w.get_finished({});
      if (finished != nullptr) finished->push_back(std::move(done));
      for (gpu_block b : w.get_block_ids_with_load_errors()) load_errors.push_back(b);
      w.clear_connector_metadata();
    }
    return load_errors;
  }

  /// A store job and every job result of the two steps it took.
  struct store_run {
    job_id store = 0;
    std::vector<job_result> results;
  };

  /// Request a (8 tokens, `ka`) in GPU blocks 1-2: step 1 writes them and plans one store of
  /// both; step 2 submits it and its copies run.
  result<store_run> store_request_a(scheduler_connector& sc, const std::vector<block_key>& ka) {
    const scheduler::request_view a{"a", ka, 8};
    const std::vector<gpu_block> blocks_a{1, 2};
    if (auto st = sc.update_state_after_alloc(a, blocks_a, 0); !st) return st;
    auto out = step(sc, 1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}});
    if (!out) return out.error();
    if (last_meta_.stores.size() != 1) {
      return make_error(errc::internal, std::to_string(last_meta_.stores.size()) + " stores");
    }
    store_run run{last_meta_.stores[0].id, out->jobs};
    out = step(sc, 2);
    if (!out) return out.error();
    run.results.insert(run.results.end(), out->jobs.begin(), out->jobs.end());
    return run;
  }

  /// TP=2 with the step deadline alone (a job fails two steps after it was planned) and the
  /// channel faults `faults`; both ranks registered.
  result<std::unique_ptr<scheduler_connector>> tp2_with_step_deadline(
      const std::vector<std::string>& faults = {}) {
    auto cfg = sched_cfg(2);
    cfg.job_timeout = 0ms;
    cfg.job_timeout_steps = 2;
    for (const auto& spec : faults) {
      auto parsed = parse_fault_spec(spec);
      if (!parsed) return parsed.error();
      cfg.faults.specs.push_back(*parsed);
    }
    auto sc = scheduler_connector::create(cfg);
    if (!sc) return sc.error();
    for (uint32_t r = 0; r < 2; ++r) {
      if (auto added = add_worker(sc->get(), worker_cfg(r, 2)); !added) {
        return make_error(errc::internal, added.message());
      }
    }
    if (auto st = (*sc)->wait_for_workers(5s); !st) return st;
    return std::move(*sc);
  }

  /// store_request_a of `ka`, then, with vLLM's sets applied from then on, request b (9 tokens,
  /// the same two blocks) hits both and loads them into GPU blocks 5-6 of its 5-7.
  status store_a_then_load_b(scheduler_connector& sc, const std::vector<block_key>& ka) {
    if (auto run = store_request_a(sc, ka); !run) return run.error();
    if (auto st = sc.apply_request_output({}, {}); !st) return st;
    const scheduler::request_view b{"b", ka, 9};
    if (sc.get_num_new_matched_tokens(b, 0) != scheduler::match_result{8u, true}) {
      return make_error(errc::internal, "b does not hit both blocks of a");
    }
    const std::vector<gpu_block> blocks_b{5, 6, 7};
    return sc.update_state_after_alloc(b, blocks_b, 8);
  }

  const std::string instance_ = shm::testing::test_instance_prefix() + "embed";
  std::vector<rank_kv> ranks_;
  connector_metadata last_meta_;
};

/// The one run record `dir` holds; an error when it holds another number of files.
result<record::run_record> the_record_in(const std::filesystem::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  if (files.size() != 1) {
    return make_error(errc::invalid_argument,
                      std::to_string(files.size()) + " files in " + dir.string() + ", not one");
  }
  return record::read_record_file(files[0]);
}

std::vector<block_key> keys(std::initializer_list<uint64_t> ids) {
  std::vector<block_key> out;
  for (uint64_t i : ids) out.push_back(block_key::from_index(i));
  return out;
}

/// Step `step` with no worker: a new request `id` of two full blocks (keys `base`, `base + 1`)
/// scheduled whole, so that its store is planned; the step's metadata.
result<connector_metadata> plan_a_store(scheduler_connector& sc, step_id step,
                                        const std::string& id, uint64_t base) {
  const auto k = keys({base, base + 1});
  const scheduler::request_view r{id, k, 8};
  const std::vector<gpu_block> blocks{1, 2};
  if (auto st = sc.update_state_after_alloc(r, blocks, 0); !st) return st;
  const std::vector<scheduler::scheduled_request> fresh{{r, blocks, 0, 8}};
  return sc.build_connector_meta({step, fresh, {}, {}});
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST_P(EmbedTest, StoreThenLoadAcrossTwoRanksIsByteExact) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  EXPECT_EQ((*sc)->port(), 0);  // listen = false
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());

  // Request a: 8 tokens = 2 blocks, nothing offloaded yet; its prefill stores both blocks.
  const auto ka = keys({11, 12});
  const scheduler::request_view a{"a", ka, 8};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(a, 0), (scheduler::match_result{0u, false}));
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  step_id s = 1;
  auto out = step(**sc, s, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}});
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  const auto a_slots = last_meta_.stores[0].slots;
  ASSERT_EQ(a_slots.size(), 2u);
  EXPECT_TRUE((*sc)->request_finished("a"));  // its store is in flight: delay_free

  EXPECT_FALSE(contains(out->completions.finished_sending, "a"));  // queued for step 2
  // Step 2 submits the store at its start and its copies run: a's blocks may be freed.
  out = step(**sc, ++s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(contains(out->completions.finished_sending, "a"));
  const auto events = (*sc)->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, kv_event_kind::stored);
  EXPECT_EQ(events[0].keys, ka);

  // Request b: a's 8 tokens + 1. Both blocks hit in the CPU pool and load into fresh blocks.
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(b, 0), (scheduler::match_result{8u, true}));
  const std::vector<gpu_block> blocks_b{5, 6, 7};
  ASSERT_TRUE((*sc)->update_state_after_alloc(b, blocks_b, 8).ok());
  out = step(**sc, ++s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  ASSERT_EQ(last_meta_.loads.size(), 1u);
  EXPECT_EQ(last_meta_.loads[0].slots, a_slots);
  EXPECT_EQ(last_meta_.loads[0].gpu_blocks, (std::vector<gpu_block>{5, 6}));
  EXPECT_TRUE(contains(out->completions.finished_recving, "b"));  // loaded in its own step
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(5), pattern(100, rk.wc->rank(), 1)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.read(6), pattern(100, rk.wc->rank(), 2)) << "rank " << rk.wc->rank();
  }
  EXPECT_FALSE((*sc)->request_finished("b"));

  EXPECT_EQ((*sc)->stats().stores_ok, 1u);
  EXPECT_EQ((*sc)->stats().loads_ok, 1u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  EXPECT_EQ((*sc)->tracked_requests(), 0u);
  auto stopped = (*sc)->shutdown(5s);
  ASSERT_TRUE(stopped.ok()) << stopped.error().to_string();
  EXPECT_EQ(*stopped, 2u);
}

TEST_P(EmbedTest, VllmsBlockTableAndRequestLevelOutputsReachThePlanner) {
  auto sc = scheduler_connector::create(sched_cfg(1));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 1)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());
  const auto ka = keys({41, 42});
  const scheduler::request_view a{"a", ka, 8};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(a, 0), (scheduler::match_result{0u, false}));
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  ASSERT_TRUE(step(**sc, 1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}}).ok());
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  const auto a_slots = last_meta_.stores[0].slots;
  // The engine aggregates its workers' outputs itself (as vLLM does) and names a in
  // finished_sending before a finished: with a worker attached the set completes no job and
  // releases nothing (a holds no delay-freed blocks); the coordinator's result decides.
  const std::vector<std::string_view> sending{"a"};
  ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
  EXPECT_EQ((*sc)->stats().stores_ok, 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 1u);
  auto out = step(**sc, 2);  // the copies ran: rank 0's report of the store arrives
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(out->completions.empty());
  EXPECT_EQ((*sc)->stats().stores_ok, 1u);
  EXPECT_EQ((*sc)->stats().rejected_results, 0u);

  // b: a's tokens + 1. The block table says the GPU prefix cache holds block 5 (a's first block)
  // although nothing was computed: the load starts at the first block without a hash.
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(b, 0), (scheduler::match_result{8u, true}));
  const std::vector<gpu_block> blocks_b{5, 6, 7};
  const std::vector<uint8_t> hashed{1, 0, 0};
  ASSERT_TRUE((*sc)->update_state_after_alloc(b, {blocks_b, hashed}, 8).ok());
  ASSERT_TRUE(step(**sc, 3).ok());
  ASSERT_EQ(last_meta_.loads.size(), 1u);
  EXPECT_EQ(last_meta_.loads[0].gpu_blocks, (std::vector<gpu_block>{6}));
  EXPECT_EQ(last_meta_.loads[0].slots, (std::vector<cpu_slot>{a_slots[1]}));
}

// vLLM's finished_sending names a request once every worker is done with its stores, whatever
// their outcome: with workers attached it frees the request's blocks, and the store's outcome
// stays the coordinator's. Here rank 1's copy fails and vLLM's set comes before kvconnect's
// reports are applied.
TEST_P(EmbedTest, AStoreThatFailedOnOneRankIsNotStoredWhenVllmsFinishedSetNamesItFirst) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(
      add_tp2_workers_rank1_faulty(sc->get(), "fail_copy:rank=1,dir=store,at=completion,nth=0"));

  const auto ka = keys({61, 62});
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  ASSERT_TRUE(step(**sc, 1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}}).ok());
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  EXPECT_TRUE((*sc)->request_finished("a"));  // delay_free: its store is in flight
  auto errors = run_workers(**sc, 2);  // the copies run; rank 1's fails; the reports go out
  ASSERT_TRUE(errors.ok()) << errors.error().to_string();
  const std::vector<std::string_view> sending{"a"};
  ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
  EXPECT_EQ((*sc)->stats().stores_ok, 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 1u);  // the store waits for the coordinator

  auto out = (*sc)->update_connector_output(2, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  // a's blocks are freed once, on vLLM's word; the failed store is dropped, not stored.
  EXPECT_EQ(out->completions.finished_sending, (std::vector<std::string>{"a"}));
  ASSERT_EQ(out->jobs.size(), 1u);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ((*sc)->stats().stores_ok, 0u);
  EXPECT_EQ((*sc)->stats().stores_failed, 1u);
  EXPECT_EQ((*sc)->stats().rejected_results, 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  EXPECT_EQ((*sc)->tracked_requests(), 0u);
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(b, 0), (scheduler::match_result{0u, false}));
}

TEST_P(EmbedTest, AStoreNamedByVllmsFinishedSetFirstIsStoredByTheCoordinatorsResult) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());

  const auto ka = keys({71, 72});
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  ASSERT_TRUE(step(**sc, 1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}}).ok());
  EXPECT_TRUE((*sc)->request_finished("a"));
  ASSERT_TRUE(run_workers(**sc, 2).ok());
  const std::vector<std::string_view> sending{"a"};
  ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
  EXPECT_EQ((*sc)->stats().stores_ok, 0u);
  auto out = (*sc)->update_connector_output(2, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->completions.finished_sending, (std::vector<std::string>{"a"}));  // once
  EXPECT_EQ((*sc)->stats().stores_ok, 1u);
  EXPECT_EQ((*sc)->stats().rejected_results, 0u);
  EXPECT_EQ((*sc)->tracked_requests(), 0u);
  // vLLM's aggregator naming a again (a duplicate report) reaches the engine no more.
  ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
  out = (*sc)->update_connector_output();
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(out->completions.finished_sending.empty());
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(b, 0), (scheduler::match_result{8u, true}));
}

// vLLM names a request in finished_recving once every worker reported it, with the workers'
// failed copies in the same output's invalid_block_ids: the load is settled then, failed, and its
// blocks are not named again (vLLM has them); the coordinator's failure later changes nothing.
TEST_P(EmbedTest, ALoadThatFailedOnARankIsSettledByVllmsSetsWithTheEnginesInvalidBlocks) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_tp2_workers_rank1_faulty(sc->get(), "fail_copy:rank=1,dir=load,nth=0"));

  const auto ka = keys({81, 82});
  auto run = store_request_a(**sc, ka);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  const scheduler::request_view b{"b", ka, 9};
  ASSERT_EQ((*sc)->get_num_new_matched_tokens(b, 0), (scheduler::match_result{8u, true}));
  const std::vector<gpu_block> blocks_b{5, 6, 7};
  ASSERT_TRUE((*sc)->update_state_after_alloc(b, blocks_b, 8).ok());
  auto errors = run_workers(**sc, 3);
  ASSERT_TRUE(errors.ok()) << errors.error().to_string();
  EXPECT_EQ(*errors, (std::vector<gpu_block>{5, 6}));  // rank 1's, to vLLM
  const std::vector<std::string_view> recving{"b"};
  ASSERT_TRUE((*sc)->apply_request_output({}, recving, *errors).ok());
  EXPECT_FALSE((*sc)->planner().load_in_flight("b"));
  EXPECT_EQ((*sc)->stats().loads_failed, 1u);
  EXPECT_EQ((*sc)->stats().loads_settled, 1u);
  auto out = (*sc)->update_connector_output(3, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->completions.finished_recving, (std::vector<std::string>{"b"}));
  EXPECT_TRUE(out->completions.invalid_block_ids.empty());
  EXPECT_EQ((*sc)->stats().loads_failed, 1u);
  EXPECT_EQ((*sc)->stats().loads_ok, 0u);
  EXPECT_EQ((*sc)->stats().settled_results, 1u);  // the coordinator's failure of rank 1's part
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  EXPECT_EQ((*sc)->tables().planner.settled, 0u);
  EXPECT_FALSE((*sc)->request_finished("b"));
}

// /metrics counts a load vLLM's sets settled as they settled it, once: rank 1's report of b's
// load is lost, vLLM's sets name b with no invalid block (settled ok), and the coordinator's
// later failure at the load's deadline counts neither as a failed job nor against the load
// series, which hold rank 0's reported bytes (half of a's store: the same two blocks).
TEST_P(EmbedTest, ALoadSettledOkCountsInTheMetricsAsLoadedThoughItsDeadlineFailedIt) {
  auto sc = tp2_with_step_deadline({"drop_report:rank=1,step=3,nth=0"});
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  const auto st = store_a_then_load_b(**sc, keys({97, 98}));
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto errors = run_workers(**sc, 3);  // both copies run; rank 1's report is lost
  ASSERT_TRUE(errors.ok()) << errors.error().to_string();
  EXPECT_TRUE(errors->empty());
  const std::vector<std::string_view> recving{"b"};
  ASSERT_TRUE((*sc)->apply_request_output({}, recving, {}).ok());
  EXPECT_EQ((*sc)->stats().loads_settled, 1u);
  ASSERT_TRUE((*sc)->update_connector_output().ok());
  ASSERT_TRUE(run_workers(**sc, 4).ok());
  ASSERT_TRUE((*sc)->update_connector_output().ok());
  ASSERT_TRUE(run_workers(**sc, 5).ok());
  auto out = (*sc)->update_connector_output(5, 5s);  // the load's deadline fails rank 1's part
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ((*sc)->fault_statistics().timed_out, 1u);
  EXPECT_EQ((*sc)->stats().settled_results, 1u);
  EXPECT_EQ((*sc)->stats().loads_ok, 1u);

  const std::string text = (*sc)->metrics_text();
  auto value = [&](const std::string& series) -> double {
    const auto at = text.find("\n" + series + " ");
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + series.size() + 2));
  };
  const double stored = value("vllm:kv_offload_store_bytes_total");
  ASSERT_GT(stored, 0);
  EXPECT_EQ(value("vllm:kv_offload_load_bytes_total"), stored / 2);  // rank 0's report
  EXPECT_EQ(value("vllm:kv_offload_load_size_count"), 1);
  EXPECT_EQ(text.find("kvconnect_job_failures_total{error=\"timeout\"}"), std::string::npos);
}

// vLLM reads failed loads only from its workers, before it calls the scheduler side's
// update_connector_output. Rank 1's copy of b's load does not run before the load's step
// deadline, so the coordinator fails the load before vLLM's sets name b: the scheduler side
// releases nothing (vLLM would run b on blocks rank 1 never filled), and the next step's flush
// makes rank 1, which had not named b, name it once with the load's blocks as load errors;
// rank 0, which had, adds nothing. vLLM's aggregation then names b with those blocks invalid.
TEST_P(EmbedTest, ALoadPastItsDeadlineIsNamedOnceByTheRankThatHadNotWithItsBlocksAsLoadErrors) {
  auto sc = tp2_with_step_deadline();
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  const auto st = store_a_then_load_b(**sc, keys({91, 92}));
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<finished_requests> fin;
  const std::vector<std::string> just_b{"b"};
  // Steps 3-5: rank 1 runs no copy; rank 0 names b in step 3. The load's deadline (its second
  // later step) fails it in step 5: nothing is released to the engine.
  for (step_id s = 3; s <= 5; ++s) {
    auto errors = run_workers(**sc, s, {}, {}, {1}, &fin);
    ASSERT_TRUE(errors.ok()) << errors.error().to_string();
    EXPECT_TRUE(errors->empty());
    EXPECT_EQ(fin[0].finished_recving, s == 3 ? just_b : std::vector<std::string>{});
    EXPECT_TRUE(fin[1].finished_recving.empty());
    ASSERT_TRUE((*sc)->apply_request_output({}, {}).ok());
    auto out = (*sc)->update_connector_output(s, 5s);
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    EXPECT_TRUE(out->completions.empty()) << "step " << s;
  }
  const job_id load = 1;  // a's store is job 0
  EXPECT_EQ((*sc)->stats().loads_failed, 1u);
  EXPECT_EQ((*sc)->tables().planner.awaiting_engine, 1u);
  EXPECT_EQ((*sc)->fault_statistics().timed_out, 1u);

  // Step 6 flushes the failed load: rank 1 waits for its copy (handle_preemptions) and names b
  // with the load's blocks; rank 0 names nothing.
  auto errors = run_workers(**sc, 6, {}, {}, {}, &fin);
  ASSERT_TRUE(errors.ok()) << errors.error().to_string();
  EXPECT_EQ(last_meta_.flush, std::vector<job_id>{load});
  EXPECT_TRUE(fin[0].finished_recving.empty());
  EXPECT_EQ(fin[1].finished_recving, just_b);
  EXPECT_EQ(*errors, (std::vector<gpu_block>{5, 6}));
  EXPECT_EQ(ranks_[1].read(5), pattern(100, 1, 1));  // the copy ran, at the flush's wait
  // vLLM's aggregation names b (every rank did), with those blocks invalid: released once.
  const std::vector<std::string_view> recving{"b"};
  ASSERT_TRUE((*sc)->apply_request_output({}, recving, *errors).ok());
  auto out = (*sc)->update_connector_output(6, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->completions.finished_recving, just_b);
  EXPECT_TRUE(out->completions.invalid_block_ids.empty());
  EXPECT_EQ((*sc)->tables().planner.awaiting_engine, 0u);
  EXPECT_FALSE((*sc)->request_finished("b"));
  errors = run_workers(**sc, 7, {}, {}, {}, &fin);  // nothing named again
  ASSERT_TRUE(errors.ok()) << errors.error().to_string();
  EXPECT_TRUE(errors->empty());
  EXPECT_TRUE(fin[0].finished_recving.empty() && fin[1].finished_recving.empty());
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
}

TEST_P(EmbedTest, JobResultsFromOutsideTheStepChannelCompleteJobsOnce) {
  // No worker: the test plays the workers' part, as a replay of vLLM's calls does.
  auto sc = scheduler_connector::create(sched_cfg(1));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  const auto ka = keys({51, 52});
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  const std::vector<scheduler::scheduled_request> fresh{{a, blocks_a, 0, 8}};
  auto meta = (*sc)->build_connector_meta({1, fresh, {}, {}});
  ASSERT_TRUE(meta.ok()) << meta.error().to_string();
  ASSERT_EQ(meta->stores.size(), 1u);
  const connector_output done{1, {{meta->stores[0].id, transfer_kind::store, true}}};
  ASSERT_TRUE((*sc)->apply_job_results(done).ok());
  EXPECT_EQ((*sc)->stats().stores_ok, 1u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  const auto events = (*sc)->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, kv_event_kind::stored);
  EXPECT_EQ(events[0].keys.size(), 2u);
  // A duplicate is named and changes nothing.
  EXPECT_FALSE((*sc)->apply_job_results(done).ok());
  EXPECT_EQ((*sc)->stats().stores_ok, 1u);
  EXPECT_EQ((*sc)->stats().rejected_results, 1u);
}

TEST_P(EmbedTest, JobsTheEngineCompletedAreForgottenByTheCoordinatorNotTimedOut) {
  // No worker, step deadlines two steps out: each step's store is completed by the engine,
  // through apply_job_results or through its own finished_sending, and the coordinator must
  // stop waiting for it there and then, not fail it (and log it) two steps later.
  auto cfg = sched_cfg(1);
  cfg.job_timeout_steps = 2;
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  for (step_id step = 1; step <= 8; ++step) {
    const std::string id = "r" + std::to_string(step);
    auto meta = plan_a_store(**sc, step, id, 100 + 2 * step);
    ASSERT_TRUE(meta.ok()) << meta.error().to_string();
    ASSERT_EQ(meta->stores.size(), 1u);
    EXPECT_EQ((*sc)->tables().coordinator_jobs, 1u);
    if (step % 2 == 0) {
      const connector_output done{step, {{meta->stores[0].id, transfer_kind::store, true}}};
      ASSERT_TRUE((*sc)->apply_job_results(done).ok());
    } else {
      EXPECT_TRUE((*sc)->request_finished(id));  // delay_free: it stored
      const std::vector<std::string_view> sending{id};
      ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
    }
    EXPECT_EQ((*sc)->tables().coordinator_jobs, 0u) << "step " << step;
    EXPECT_EQ((*sc)->tables().coordinator_deadlines, 0u) << "step " << step;
    ASSERT_TRUE((*sc)->update_connector_output().ok());
  }
  EXPECT_EQ((*sc)->stats().stores_ok, 8u);
  EXPECT_EQ((*sc)->stats().rejected_results, 0u);  // no timed-out result of a completed job
  EXPECT_EQ((*sc)->fault_statistics().timed_out, 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
}

TEST_P(EmbedTest, ARecordedRunWhoseEngineCompletedJobsReplaysWithoutADivergence) {
  // The coordinator forgets the jobs the engine's finished_sending completed; the record holds
  // that request output, not the forgetting: the replay must forget the same jobs, or their
  // step deadlines fail them there and its outputs differ from the recorded ones.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvc-embed-settle-" + std::to_string(::getpid()));
  auto cfg = sched_cfg(1);
  cfg.job_timeout_steps = 2;
  cfg.observe.record = true;
  cfg.observe.record_dir = dir.string();
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  constexpr step_id steps = 6;
  for (step_id step = 1; step <= steps; ++step) {
    const std::string id = "r" + std::to_string(step);
    auto meta = plan_a_store(**sc, step, id, 300 + 2 * step);
    ASSERT_TRUE(meta.ok()) << meta.error().to_string();
    EXPECT_TRUE((*sc)->request_finished(id));
    const std::vector<std::string_view> sending{id};
    ASSERT_TRUE((*sc)->apply_request_output(sending, {}).ok());
    ASSERT_TRUE((*sc)->update_connector_output().ok());
  }
  EXPECT_EQ((*sc)->fault_statistics().timed_out, 0u);
  EXPECT_EQ((*sc)->tables().coordinator_jobs, 0u);
  ASSERT_TRUE((*sc)->shutdown(5s).ok());
  auto rec = the_record_in(dir);
  ASSERT_TRUE(rec.ok()) << rec.error().to_string();
  auto same = record::replay(*rec, {});
  ASSERT_TRUE(same.ok()) << same.error().to_string();
  EXPECT_FALSE(same->first.has_value()) << record::describe(*same->first);
  EXPECT_EQ(same->steps, steps);
  std::filesystem::remove_all(dir);
}

TEST_P(EmbedTest, JobResultsFromOutsideTheStepChannelAreRefusedWhileTheRunIsRecorded) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvc-embed-record-" + std::to_string(::getpid()));
  auto cfg = sched_cfg(1);
  cfg.observe.record = true;
  cfg.observe.record_dir = dir.string();
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  const auto ka = keys({61, 62});
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  const std::vector<scheduler::scheduled_request> fresh{{a, blocks_a, 0, 8}};
  auto meta = (*sc)->build_connector_meta({1, fresh, {}, {}});
  ASSERT_TRUE(meta.ok()) << meta.error().to_string();
  ASSERT_EQ(meta->stores.size(), 1u);
  const connector_output done{1, {{meta->stores[0].id, transfer_kind::store, true}}};
  EXPECT_EQ((*sc)->apply_job_results(done).code(), errc::precondition_failed);
  EXPECT_EQ((*sc)->stats().stores_ok, 0u);  // nothing applied
  EXPECT_EQ((*sc)->jobs_in_flight(), 1u);
  ASSERT_TRUE((*sc)->shutdown(5s).ok());
  size_t records = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".kvcrec" && std::filesystem::file_size(e.path()) > 0) ++records;
  }
  EXPECT_EQ(records, 1u);
  std::filesystem::remove_all(dir);
}

TEST_P(EmbedTest, TwentyThousandStepsLeaveNoPerRequestStateBehind) {
  // A worker that is not told which requests finished (the standalone `kvconnect worker`) takes
  // them from the metadata: after 20,000 steps of one stored request each, every per-request
  // table is empty at quiescence, on the scheduler side and on the rank (sizes, not RSS).
  auto sc = scheduler_connector::create(sched_cfg(1));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 1)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());
  worker_connector& w = *ranks_[0].wc;
  constexpr uint64_t steps = 20000;
  std::vector<block_key> key(1);
  size_t most_tracked = 0;
  scheduler_connector::table_sizes held;
  for (step_id s = 1; s <= steps + 2; ++s) {
    std::vector<scheduler::scheduled_request> fresh;
    const std::string id = "r" + std::to_string(s);
    const std::vector<gpu_block> blocks{static_cast<gpu_block>(1 + s % 8)};
    key[0] = block_key::from_index(1'000'000 + s);
    const scheduler::request_view req{id, key, bs};
    if (s <= steps) {  // the last two steps only drain
      (void)(*sc)->get_num_new_matched_tokens(req, 0);
      ASSERT_TRUE((*sc)->update_state_after_alloc(req, blocks, 0).ok());
      fresh.push_back({req, blocks, 0, bs});
    }
    auto meta = (*sc)->build_connector_meta({s, fresh, {}, {}});
    ASSERT_TRUE(meta.ok()) << meta.error().to_string();
    ASSERT_TRUE(w.bind_connector_metadata(s, 5s).ok());
    ASSERT_TRUE(w.handle_preemptions().ok());
    ASSERT_TRUE(w.start_load_kv().ok());
    ranks_[0].engine().advance_all();
    ASSERT_TRUE(w.wait_for_save().ok());
    w.get_finished(w.metadata()->finished_requests);
    w.clear_connector_metadata();
    auto out = (*sc)->update_connector_output(s, 5s);
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    if (s <= steps) (void)(*sc)->request_finished(id);
    (void)(*sc)->take_events();
    most_tracked = std::max(most_tracked, w.tracked_requests());
    if (s == steps / 2) held = (*sc)->tables();  // a request in the middle of the run
  }
  // The accessors see the tables in use (a stored request is held until its job completed).
  EXPECT_GT(held.planner.requests + held.planner.jobs + held.coordinator_remembered, 0u);
  EXPECT_EQ((*sc)->stats().stores_ok, steps);
  EXPECT_LE(most_tracked, 3u);  // bounded all along: a request's entry ends a step after it
  EXPECT_EQ(w.tracked_requests(), 0u);
  EXPECT_EQ(w.jobs_known(), 0u);
  EXPECT_EQ(w.transfers_in_flight(), 0u);
  EXPECT_EQ((*sc)->tracked_requests(), 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  // Every table of the planner, the coordinator's aggregator and the step channel.
  const auto t = (*sc)->tables();
  EXPECT_EQ(t.planner, scheduler::planner_tables{});
  EXPECT_EQ(t.planner.requests, 0u);  // (named, for the failure message)
  EXPECT_EQ(t.planner.request_slots, 0u);
  EXPECT_EQ(t.planner.finished_for_meta, 0u);
  EXPECT_EQ(t.coordinator_jobs, 0u);
  EXPECT_EQ(t.coordinator_deadlines, 0u);
  EXPECT_EQ(t.coordinator_unstamped, 0u);
  EXPECT_EQ(t.coordinator_ready_steps, 0u);
  EXPECT_LE(t.coordinator_remembered, coordinator::coordinator_options{}.finished_memory);
  EXPECT_EQ(t.channel_queued_steps, 0u);
}

TEST_P(EmbedTest, WorkerOverLoopbackTcpRegistersAndReportsEachStep) {
  auto cfg = sched_cfg(1);
  cfg.listen = true;
  cfg.transport = step_transport::zmq;  // tcp: the worker has an actor system of its own
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_NE((*sc)->port(), 0);
  auto wc = worker_cfg(0, 1);
  wc.mode = connection_mode::connect;
  wc.network.port = (*sc)->port();
  ASSERT_TRUE(add_worker(nullptr, wc));  // its own actor system, over TCP
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());
  for (step_id s = 1; s <= 3; ++s) {
    auto out = step(**sc, s);
    ASSERT_TRUE(out.ok()) << out.error().to_string();
    EXPECT_EQ(out->through_step, s);
  }
  auto stopped = (*sc)->shutdown(5s);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(*stopped, 1u);
  // The scheduler is gone: the worker learns it from its queue, not from a timeout.
  EXPECT_EQ(ranks_[0].wc->bind_connector_metadata(4, 10s).code(), errc::io_error);
  EXPECT_FALSE(ranks_[0].wc->connected());
}

// vLLM's order: the workers exist (and registered their KV caches) before the scheduler side.
// The first creates the node's segment, the scheduler side attaches it and publishes its port
// there, the workers join it from their own threads, and its first step waits for them.
TEST_P(EmbedTest, WorkersBuiltBeforeTheSchedulerJoinItAndItsFirstStepWaitsForThem) {
  for (rank_id r = 0; r < 2; ++r) {
    auto wc = worker_cfg(r, 2);
    wc.mode = connection_mode::connect;
    wc.network.port = 0;  // the port the scheduler side publishes in the segment
    wc.pool.create_or_attach = true;
    ASSERT_TRUE(add_worker(nullptr, wc, /*in_background=*/true));
  }
  const std::string segment = segment_name_for(worker_cfg(0, 2).pool, worker_cfg(0, 2).topology);
  EXPECT_TRUE(shm::segment::exists(segment).value());  // a worker created it
  auto cfg = sched_cfg(2);
  cfg.listen = true;
  cfg.transport = step_transport::zmq;  // tcp: the workers have actor systems of their own
  cfg.pool.create_or_attach = true;
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  EXPECT_EQ((*sc)->segment_name(), segment);
  auto a = store_request_a(**sc, keys({21, 22}));  // no wait_for_workers
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(std::count_if(a->results.begin(), a->results.end(),
                          [&](const job_result& j) { return j.job == a->store && j.ok; }),
            1);
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(1), pattern(100, rk.wc->rank(), 1));
  }
  ASSERT_TRUE((*sc)->shutdown(5s).ok());
  sc->reset();
  ranks_.clear();  // the rank that created the segment removes it
  EXPECT_FALSE(shm::segment::exists(segment).value());
}

// A rank on another node than its scheduler side finds no port in its node's segment: its config
// names the scheduler's. Built before the scheduler (create_or_attach), it joins once the
// scheduler side listens there; one whose fixed port nothing answers gets a timeout naming it.
TEST_P(EmbedTest, AWorkerWithAFixedPortBuiltFirstJoinsOnceTheSchedulerListensThere) {
  const uint16_t port = kvc::testing::free_loopback_port();
  ASSERT_NE(port, 0);
  const auto wc = fixed_port_worker(port);
  ASSERT_TRUE(add_worker(nullptr, wc, /*in_background=*/true));  // nothing listens yet
  auto cfg = sched_cfg(1);
  cfg.listen = true;
  cfg.transport = step_transport::zmq;
  cfg.network.port = port;
  cfg.pool.create_or_attach = true;
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  auto a = store_request_a(**sc, keys({31, 32}));
  ASSERT_TRUE(a.ok()) << a.error().to_string();
  EXPECT_EQ(std::count_if(a->results.begin(), a->results.end(),
                          [&](const job_result& j) { return j.job == a->store && j.ok; }),
            1);
  EXPECT_EQ(ranks_[0].read(1), pattern(100, 0, 1));
  ASSERT_TRUE((*sc)->shutdown(5s).ok());
  sc->reset();
  ranks_.clear();  // the rank created the segment, and removes it
  EXPECT_FALSE(shm::segment::exists(segment_name_for(wc.pool, wc.topology)).value());
}

TEST_P(EmbedTest, AWorkerWithAFixedPortThatNothingAnswersGetsATimeoutNamingIt) {
  const uint16_t port = kvc::testing::free_loopback_port();
  ASSERT_NE(port, 0);
  auto wc = fixed_port_worker(port);
  wc.join_timeout = 50ms;
  ASSERT_TRUE(add_worker(nullptr, wc, /*in_background=*/true));
  const status st = ranks_[0].wc->bind_connector_metadata(1, std::chrono::hours{1});
  EXPECT_EQ(st.code(), errc::timeout);
  EXPECT_NE(st.message().find("no scheduler side answered at 127.0.0.1:" + std::to_string(port) +
                              " within 50 ms"),
            std::string::npos)
      << st.message();
  ranks_.clear();
  EXPECT_FALSE(shm::segment::exists(segment_name_for(wc.pool, wc.topology)).value());
}

TEST_P(EmbedTest, AWorkerWhoseSchedulerNeverComesGetsATimeoutFromItsFirstStep) {
  auto wc = worker_cfg(0, 1);
  wc.mode = connection_mode::connect;
  wc.network.port = 0;
  wc.pool.create_or_attach = true;
  wc.join_timeout = 50ms;
  ASSERT_TRUE(add_worker(nullptr, wc, /*in_background=*/true));  // returns without a scheduler
  const std::string segment = segment_name_for(wc.pool, wc.topology);
  EXPECT_TRUE(shm::segment::exists(segment).value());
  // The step's own wait is an hour: the error can only be the registration's.
  const status st = ranks_[0].wc->bind_connector_metadata(1, std::chrono::hours{1});
  EXPECT_EQ(st.code(), errc::timeout);
  EXPECT_NE(st.message().find("no scheduler side published its port in segment " + segment +
                              " within 50 ms"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(ranks_[0].wc->bind_connector_metadata(1, std::chrono::hours{1}).code(),
            errc::timeout);  // again, at once
  ranks_.clear();
  EXPECT_FALSE(shm::segment::exists(segment).value());
}

TEST_P(EmbedTest, RegistrationRefusalsComeBackAsErrors) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok());
  auto bad_token = worker_cfg(0, 2);
  bad_token.token = "guess";
  auto w = worker_connector::create(bad_token, sc->get());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.code(), errc::protocol_mismatch) << w.error().to_string();

  auto other_pool = worker_cfg(0, 2);
  other_pool.pool.slots_per_rank = slots + 1;  // another geometry than the segment's
  w = worker_connector::create(other_pool, sc->get());
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.code(), errc::layout_mismatch) << w.error().to_string();

  w = worker_connector::create(worker_cfg(0, 2), nullptr);  // in_process without a scheduler
  EXPECT_EQ(w.code(), errc::invalid_argument);
  w = worker_connector::create(worker_cfg(2, 2), sc->get());  // rank outside the world
  EXPECT_EQ(w.code(), errc::invalid_argument);

  // The refusals changed nothing: rank 0 registers, and twice is refused.
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  w = worker_connector::create(worker_cfg(0, 2), sc->get());
  EXPECT_EQ(w.code(), errc::protocol_mismatch) << w.error().to_string();
  EXPECT_EQ((*sc)->wait_for_workers(0ms).code(), errc::timeout);  // rank 1 is missing
}

TEST_P(EmbedTest, ALostRankFailsItsJobsAndTheOtherRanksGoOn) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());

  // Rank 1 goes (its connector ends: the scheduler actor sees it leave) before step 1 runs;
  // rank 0 submits the store in step 2 and its copies run: rank 1 does not hold the steps back.
  ranks_.pop_back();
  const auto ka = keys({21, 22});
  auto run = store_request_a(**sc, ka);
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  const auto& [store, results] = *run;
  ASSERT_EQ(results.size(), 1u);  // once: failed for the lost rank, rank 0's report absorbed
  EXPECT_EQ(results[0].job, store);
  EXPECT_FALSE(results[0].ok);
  EXPECT_EQ(results[0].error, errc::io_error);
  // The scheduler learns of the loss asynchronously: before or after it planned the store.
  EXPECT_TRUE(results[0].detail == "planned while rank(s) 1 were lost" ||
              results[0].detail == "rank 1 was lost before reporting it")
      << results[0].detail;
  EXPECT_EQ((*sc)->stats().stores_failed, 1u);
  EXPECT_TRUE((*sc)->take_events().empty());  // a failed store stores nothing
  EXPECT_EQ((*sc)->get_num_new_matched_tokens({"a", ka, 8}, 0),
            (scheduler::match_result{0u, false}));
}

// A copy that fails on one rank reaches the engine's job result with that rank's words (the
// cuda backend's are the CUDA call and error name), through the step report and the coordinator.
TEST_P(EmbedTest, AFailedCopyReachesTheSchedulerWithItsRankAndCause) {
  auto sc = scheduler_connector::create(sched_cfg(2));
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(
      add_tp2_workers_rank1_faulty(sc->get(), "fail_copy:rank=1,dir=store,at=completion,nth=0"));

  auto run = store_request_a(**sc, keys({31, 32}));
  ASSERT_TRUE(run.ok()) << run.error().to_string();
  const auto& [store, results] = *run;
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].job, store);
  EXPECT_FALSE(results[0].ok);
  EXPECT_EQ(results[0].error, errc::injected_fault);
  EXPECT_EQ(results[0].detail, "rank 1: faulty copy engine: injected fail_at_completion");
  EXPECT_EQ(failure_line(results[0]),
            "job " + std::to_string(store) +
                " (store) failed: injected_fault: rank 1: faulty copy engine: injected "
                "fail_at_completion");
  EXPECT_EQ((*sc)->stats().stores_failed, 1u);
}

// The engine of a launch waits for each step's output up to runtime.step_timeout_ms, which
// check_config keeps above runtime.job_timeout_ms: a lost report then costs the step's jobs,
// failed at their deadline, and never the wait. A wait exactly as long as the deadline is the
// limit: it started after the step was planned, so its end is past the step's deadline.
TEST_P(EmbedTest, AWaitAsLongAsTheJobDeadlineGetsTheOutputOfAStepWhoseReportWasLost) {
  scheduler_connector_config cfg = sched_cfg(1);
  cfg.job_timeout = 20ms;
  cfg.job_timeout_steps = 0;  // the time deadline alone
  auto drop = parse_fault_spec("drop_report:nth=0");  // rank 0's report of step 1
  ASSERT_TRUE(drop.ok()) << drop.error().to_string();
  cfg.faults.specs.push_back(*drop);
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 1)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());

  // Step 1 plans the store of request a (its copies run in step 2); the step's report is lost.
  const auto ka = keys({41, 42});  // outlives the view
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE((*sc)->update_state_after_alloc(a, blocks_a, 0).ok());
  auto out = step(**sc, 1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}}, cfg.job_timeout);
  ASSERT_TRUE(out.ok()) << out.error().to_string();  // not errc::timeout
  EXPECT_GE(out->through_step, 1u);
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  ASSERT_EQ(out->jobs.size(), 1u);  // the store failed at its deadline, with the step
  EXPECT_EQ(out->jobs[0].job, last_meta_.stores[0].id);
  EXPECT_FALSE(out->jobs[0].ok);
  EXPECT_EQ(out->jobs[0].error, errc::timeout);
  EXPECT_EQ((*sc)->fault_statistics().injected[static_cast<size_t>(fault_kind::drop_report)], 1u);
}

TEST_P(EmbedTest, BindTakesTheMetadataOfItsStepOnly) {
  auto sc = scheduler_connector::create(sched_cfg(1));
  ASSERT_TRUE(sc.ok());
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 1)));
  worker_connector& w = *ranks_[0].wc;
  EXPECT_EQ(w.bind_connector_metadata(1, 0ms).code(), errc::timeout);  // nothing planned yet
  ASSERT_TRUE((*sc)->build_connector_meta({1, {}, {}, {}}).ok());
  EXPECT_EQ((*sc)->build_connector_meta({1, {}, {}, {}}).code(), errc::invalid_argument);
  EXPECT_EQ(w.bind_connector_metadata(2, 5s).code(), errc::invalid_argument);  // step 1 is next
  EXPECT_EQ(w.metadata(), nullptr);
  ASSERT_TRUE(w.bind_connector_metadata(1, 5s).ok());  // still queued
  ASSERT_NE(w.metadata(), nullptr);
  EXPECT_EQ(w.metadata()->step, 1u);
  EXPECT_EQ(w.bind_connector_metadata(1, 5s).code(), errc::precondition_failed);
  EXPECT_EQ((*sc)->update_connector_output(1, 0ms).code(), errc::timeout);  // not reported yet
  w.clear_connector_metadata();  // reports step 1 without a get_finished
  auto out = (*sc)->update_connector_output(1, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->through_step, 1u);
  EXPECT_TRUE(out->jobs.empty());

  // Steps 2 and 3: waiting for step 3's output applies step 2's too (outputs come in order);
  // polling afterwards finds nothing new and does not wait.
  for (step_id s = 2; s <= 3; ++s) {
    ASSERT_TRUE((*sc)->build_connector_meta({s, {}, {}, {}}).ok());
    ASSERT_TRUE(w.bind_connector_metadata(s, 5s).ok());
    w.get_finished({});
    w.clear_connector_metadata();
  }
  out = (*sc)->update_connector_output(3, 5s);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(out->through_step, 3u);
  auto poll = (*sc)->update_connector_output();
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ(poll->through_step, 3u);
  EXPECT_TRUE(poll->jobs.empty() && poll->completions.empty());
}

TEST_P(EmbedTest, ShutdownReachesInProcessWorkers) {
  auto sc = scheduler_connector::create(sched_cfg(1));
  ASSERT_TRUE(sc.ok());
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 1)));
  auto stopped = (*sc)->shutdown(5s);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(*stopped, 1u);
  EXPECT_EQ(ranks_[0].wc->bind_connector_metadata(1, 10s).code(), errc::io_error);
  EXPECT_FALSE(ranks_[0].wc->connected());
  EXPECT_EQ((*sc)->update_connector_output().code(), errc::io_error);
  EXPECT_EQ((*sc)->build_connector_meta({1, {}, {}, {}}).code(), errc::io_error);
  EXPECT_EQ(worker_connector::create(worker_cfg(0, 1), sc->get()).code(), errc::io_error);
  auto again = (*sc)->shutdown(5s);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0u);
}

/// Request a (2 blocks) is stored, then loaded by request b: 3 steps, one store and one load
/// job, 2 blocks x `page` bytes x `tp` ranks each way.
void store_then_load(
    scheduler_connector& sc,
    const std::function<result<connector_update>(step_id)>& step_fn,
    const std::function<result<connector_update>(step_id, std::vector<scheduler::scheduled_request>,
                                                 std::vector<std::pair<gpu_block, uint64_t>>)>&
        first_step) {
  const auto ka = keys({11, 12});
  const scheduler::request_view a{"a", ka, 8};
  EXPECT_EQ(sc.get_num_new_matched_tokens(a, 0), (scheduler::match_result{0u, false}));
  const std::vector<gpu_block> blocks_a{1, 2};
  ASSERT_TRUE(sc.update_state_after_alloc(a, blocks_a, 0).ok());
  auto out = first_step(1, {{a, blocks_a, 0, 8}}, {{1, 100}, {2, 100}});
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(sc.request_finished("a"));
  out = step_fn(2);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  const scheduler::request_view b{"b", ka, 9};
  EXPECT_EQ(sc.get_num_new_matched_tokens(b, 0), (scheduler::match_result{8u, true}));
  const std::vector<gpu_block> blocks_b{5, 6, 7};
  ASSERT_TRUE(sc.update_state_after_alloc(b, blocks_b, 8).ok());
  out = step_fn(3);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_FALSE(sc.request_finished("b"));
}

/// What the engine got from the scheduler facade, step by step: the metadata and the output.
struct engine_view {
  std::vector<connector_metadata> metas;
  std::vector<scheduler::request_completions> completions;
  std::vector<std::vector<job_result>> jobs;
  std::vector<step_id> through;
};

TEST_P(EmbedTest, EveryObserverOnOrOffGivesTheEngineTheSameAnswers) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kvc-embed-parity-" + std::to_string(::getpid()));
  auto run = [&](bool observed) {
    engine_view v;
    auto cfg = sched_cfg(2);
    if (observed) {
      cfg.observe.trace = trace::trace_level::jobs;
      cfg.observe.trace_dir = (dir / "trace").string();
      cfg.observe.record = true;
      cfg.observe.record_dir = (dir / "record").string();
      cfg.observe.serve_metrics = true;  // port 0: a free one
      cfg.observe.kv_events_endpoint = "tcp://127.0.0.1:*";
    }
    auto sc = scheduler_connector::create(cfg);
    EXPECT_TRUE(sc.ok()) << sc.error().to_string();
    if (!sc) return v;
    EXPECT_EQ((*sc)->metrics_port() != 0, observed);
    EXPECT_EQ(!(*sc)->kv_events_endpoint().empty(), observed);
    EXPECT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
    EXPECT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
    EXPECT_TRUE((*sc)->wait_for_workers(5s).ok());
    auto seen = [&](result<connector_update> out) {
      v.metas.push_back(last_meta_);
      if (out) {
        v.completions.push_back(out->completions);
        v.jobs.push_back(out->jobs);
        v.through.push_back(out->through_step);
      }
      return out;
    };
    store_then_load(
        **sc, [&](step_id s) { return seen(step(**sc, s)); },
        [&](step_id s, auto fresh, auto writes) { return seen(step(**sc, s, fresh, writes)); });
    EXPECT_TRUE((*sc)->shutdown(5s).ok());
    ranks_.clear();
    return v;
  };
  const engine_view off = run(false);
  const engine_view on = run(true);
  EXPECT_EQ(off.metas.size(), 3u);
  EXPECT_EQ(off.metas, on.metas);
  EXPECT_EQ(off.completions, on.completions);
  EXPECT_EQ(off.jobs, on.jobs);
  EXPECT_EQ(off.through, on.through);
  // The observers on wrote their files: the scheduler's trace with the facade's records, the
  // record.
  std::string trace_text;
  for (const auto& e : std::filesystem::directory_iterator(dir / "trace")) {
    if (!e.path().filename().string().starts_with("scheduler-")) continue;
    std::ifstream in(e.path());
    trace_text.append(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(trace_text.find("\"job_planned\""), std::string::npos);
  EXPECT_NE(trace_text.find("\"output_applied\""), std::string::npos);
  EXPECT_FALSE(std::filesystem::is_empty(dir / "record"));
  std::filesystem::remove_all(dir);
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST_P(EmbedTest, MetricsEndpointServesTheStepsCounters) {
  auto cfg = sched_cfg(2);
  cfg.observe.serve_metrics = true;  // port 0: a free one
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_NE((*sc)->metrics_port(), 0);
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());
  store_then_load(
      **sc, [&](step_id s) { return step(**sc, s); },
      [&](step_id s, auto fresh, auto writes) { return step(**sc, s, fresh, writes); });

  httplib::Client client("127.0.0.1", (*sc)->metrics_port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = res->body;
  const std::string moved = std::to_string(2 * page * 2);  // 2 blocks x 2 ranks, each way
  for (const std::string& line : std::vector<std::string>{
           "kvconnect_jobs_submitted_total{kind=\"store\"} 1",
           "kvconnect_jobs_completed_total{kind=\"store\"} 1",
           "kvconnect_jobs_completed_total{kind=\"load\"} 1",
           "kvconnect_jobs_failed_total{kind=\"load\"} 0", "kvconnect_steps_sent_total 3",
           "kvconnect_step_round_trip_seconds_count 3", "kvconnect_ranks_alive 2",
           "kvconnect_world_size 2", "kvconnect_jobs_in_flight 0",
           "kvconnect_lookup_hit_blocks_total 2", "vllm:kv_offload_store_bytes_total " + moved,
           "vllm:kv_offload_load_bytes_total " + moved,
           "vllm:kv_offload_total_bytes_total{transfer_type=\"GPU_to_CPU\"} " + moved,
           "vllm:kv_offload_store_size_count 1", "vllm:kv_offload_cpu_allocation_size_count 1",
           "vllm:kv_offload_cpu_cache_usage_perc 0.25",  // 2 of 8 slots
       }) {
    EXPECT_TRUE(has_line(text, line)) << line << "\n" << text;
  }
  EXPECT_EQ(text, (*sc)->metrics_text());  // the same numbers on the engine thread
  EXPECT_EQ(client.Get("/other")->status, 404);
  ASSERT_TRUE((*sc)->shutdown(5s).ok());
  res = client.Get("/metrics");  // still served until the connector goes, ranks gone
  ASSERT_TRUE(res);
  EXPECT_TRUE(has_line(res->body, "kvconnect_jobs_completed_total{kind=\"load\"} 1"));
}

TEST_P(EmbedTest, MetricsPortInUseIsAnError) {
  auto cfg = sched_cfg(1);
  cfg.observe.serve_metrics = true;
  auto first = scheduler_connector::create(cfg);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  auto cfg2 = cfg;
  cfg2.pool.instance = instance_ + "-2";
  cfg2.observe.metrics_port = (*first)->metrics_port();
  auto second = scheduler_connector::create(cfg2);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), errc::io_error);
}

/// (seq, payload) of every batch the replay endpoint keeps from `start` on.
std::vector<std::pair<uint64_t, std::string>> replay_batches(const std::string& endpoint,
                                                             uint64_t start) {
  zmq::context_t ctx{1};
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  std::string be(8, '\0');
  for (int i = 0; i < 8; ++i) be[i] = static_cast<char>(start >> (56 - 8 * i));
  dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(be), zmq::send_flags::none);
  std::vector<std::pair<uint64_t, std::string>> out;
  for (;;) {
    std::vector<zmq::message_t> f;
    (void)zmq::recv_multipart(dealer, std::back_inserter(f));
    if (f.size() != 3) {
      ADD_FAILURE() << "replay answer of " << f.size() << " frames";
      return out;
    }
    if (f[1].to_string() == std::string(8, '\xff')) return out;
    uint64_t seq = 0;
    for (unsigned char c : f[1].to_string()) seq = (seq << 8) | c;
    out.emplace_back(seq, f[2].to_string());
  }
}

TEST_P(EmbedTest, KvEventsArePublishedInVllmsWireFormat) {
  auto cfg = sched_cfg(2);
  cfg.observe.kv_events_endpoint = "tcp://127.0.0.1:*";
  cfg.observe.kv_events_replay_endpoint = "tcp://127.0.0.1:*";
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE((*sc)->kv_events_endpoint().starts_with("tcp://127.0.0.1:"));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());
  store_then_load(
      **sc, [&](step_id s) { return step(**sc, s); },
      [&](step_id s, auto fresh, auto writes) { return step(**sc, s, fresh, writes); });
  EXPECT_TRUE((*sc)->take_events().empty());  // they went to the publisher
  ASSERT_TRUE((*sc)->shutdown(5s).ok());

  const auto batches = replay_batches((*sc)->kv_events_replay_endpoint(), 0);
  ASSERT_EQ(batches.size(), 2u);  // a's stored blocks, then the pool cleared at shutdown
  EXPECT_EQ(batches[0].first, 0u);
  EXPECT_EQ(batches[1].first, 1u);
  msgpack::object_handle h = msgpack::unpack(batches[0].second.data(), batches[0].second.size());
  const msgpack::object& batch = h.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 2u);  // [ts, events]
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  const msgpack::object& events = batch.via.array.ptr[1];
  ASSERT_EQ(events.via.array.size, 1u);
  const msgpack::object& ev = events.via.array.ptr[0];
  ASSERT_EQ(ev.via.array.size, 8u);
  EXPECT_EQ(ev.via.array.ptr[0].as<std::string>(), "BlockStored");
  const msgpack::object& hashes = ev.via.array.ptr[1];
  ASSERT_EQ(hashes.via.array.size, 2u);
  for (size_t i = 0; i < 2; ++i) {
    const block_key k = keys({11, 12})[i];
    const msgpack::object& hb = hashes.via.array.ptr[i];
    ASSERT_EQ(hb.type, msgpack::type::BIN);
    std::string expected(16, '\0');
    for (int j = 0; j < 8; ++j) {
      expected[j] = static_cast<char>(k.hi >> (56 - 8 * j));
      expected[8 + j] = static_cast<char>(k.lo >> (56 - 8 * j));
    }
    EXPECT_EQ(std::string(hb.via.bin.ptr, hb.via.bin.size), expected);
  }
  EXPECT_TRUE(ev.via.array.ptr[2].is_nil());
  EXPECT_EQ(ev.via.array.ptr[3].via.array.size, 0u);
  EXPECT_EQ(ev.via.array.ptr[4].as<uint32_t>(), bs);
  EXPECT_EQ(ev.via.array.ptr[6].as<std::string>(), "CPU");
  msgpack::object_handle c = msgpack::unpack(batches[1].second.data(), batches[1].second.size());
  EXPECT_EQ(c.get().via.array.ptr[1].via.array.ptr[0].via.array.ptr[0].as<std::string>(),
            "AllBlocksCleared");
}

/// The event type names of a KV-event batch ([ts, events]), in order.
std::vector<std::string> event_types(const std::string& batch) {
  msgpack::object_handle h = msgpack::unpack(batch.data(), batch.size());
  const msgpack::object& evs = h.get().via.array.ptr[1];
  std::vector<std::string> out;
  for (uint32_t i = 0; i < evs.via.array.size; ++i)
    out.push_back(evs.via.array.ptr[i].via.array.ptr[0].as<std::string>());
  return out;
}

// vLLM main's reset_cache through the facade, with a store in flight: the next step flushes it,
// its result releases its request without reaching the pool, the freed slots take new blocks
// whose bytes load back exactly; the publisher announces the reset and the recorded run
// replays identically (and not without its reset).
TEST_P(EmbedTest, ResetCacheFlushesJobsInFlightAndTheRunReplays) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (instance_ + "-reset-record")).string();
  std::filesystem::remove_all(dir);
  struct remove_dir {
    std::string path;
    ~remove_dir() { std::filesystem::remove_all(path); }
  } cleanup{dir};
  auto cfg = sched_cfg(2);
  cfg.observe.kv_events_endpoint = "tcp://127.0.0.1:*";
  cfg.observe.kv_events_replay_endpoint = "tcp://127.0.0.1:*";
  cfg.observe.record = true;
  cfg.observe.record_dir = dir;
  auto sc = scheduler_connector::create(cfg);
  ASSERT_TRUE(sc.ok()) << sc.error().to_string();
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(0, 2)));
  ASSERT_TRUE(add_worker(sc->get(), worker_cfg(1, 2)));
  ASSERT_TRUE((*sc)->wait_for_workers(5s).ok());

  // w stored in slots 0 and 1 (steps 1-2), then a's store planned (step 3) and still queued.
  const auto kw = keys({1, 2});
  const scheduler::request_view w{"w", kw, 8};
  const std::vector<gpu_block> blocks_w{1, 2};
  ASSERT_TRUE(step(**sc, 1, {{w, blocks_w, 0, 8}}, {{1, 100}, {2, 100}}).ok());
  ASSERT_TRUE(step(**sc, 2).ok());
  EXPECT_TRUE((*sc)->request_finished("w"));
  const auto ka = keys({11, 12});
  const scheduler::request_view a{"a", ka, 8};
  const std::vector<gpu_block> blocks_a{3, 4};
  ASSERT_TRUE(step(**sc, 3, {{a, blocks_a, 0, 8}}, {{3, 300}, {4, 300}}).ok());
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  const job_id store_a = last_meta_.stores[0].id;
  ASSERT_EQ(last_meta_.stores[0].slots, (std::vector<cpu_slot>{2, 3}));

  ASSERT_TRUE((*sc)->reset_cache().ok());
  EXPECT_EQ((*sc)->planner().manager().size(), 0u);
  EXPECT_TRUE((*sc)->request_finished("a"));  // its store is still in flight: delay_free
  const std::string metrics = (*sc)->metrics_text();
  EXPECT_NE(metrics.find("kvconnect_cache_resets_total 1"), std::string::npos);
  EXPECT_NE(metrics.find("kvconnect_cpu_pool_used_slots 0"), std::string::npos);

  // Step 4 flushes a's store (its result frees a's blocks) and plans c in w's old slots.
  const auto kc = keys({21, 22});
  const scheduler::request_view c{"c", kc, 8};
  const std::vector<gpu_block> blocks_c{8, 9};
  auto out = step(**sc, 4, {{c, blocks_c, 0, 8}}, {{8, 400}, {9, 400}});
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_EQ(last_meta_.flush, std::vector<job_id>{store_a});
  ASSERT_EQ(last_meta_.stores.size(), 1u);
  EXPECT_EQ(last_meta_.stores[0].slots, (std::vector<cpu_slot>{0, 1}));
  EXPECT_TRUE(contains(out->completions.finished_sending, "a"));
  EXPECT_EQ((*sc)->stats().stale_results, 1u);
  ASSERT_TRUE(step(**sc, 5).ok());  // c's store runs
  EXPECT_TRUE((*sc)->request_finished("c"));

  // w's and a's blocks are gone; c's load back byte for byte.
  EXPECT_EQ((*sc)->get_num_new_matched_tokens({"w2", kw, 9}, 0),
            (scheduler::match_result{0u, false}));
  EXPECT_EQ((*sc)->get_num_new_matched_tokens({"a2", ka, 9}, 0),
            (scheduler::match_result{0u, false}));
  const scheduler::request_view d{"d", kc, 9};
  EXPECT_EQ((*sc)->get_num_new_matched_tokens(d, 0), (scheduler::match_result{8u, true}));
  ASSERT_TRUE((*sc)->update_state_after_alloc(d, std::vector<gpu_block>{10, 11, 12}, 8).ok());
  out = step(**sc, 6);
  ASSERT_TRUE(out.ok()) << out.error().to_string();
  EXPECT_TRUE(contains(out->completions.finished_recving, "d"));
  for (const auto& rk : ranks_) {
    EXPECT_EQ(rk.read(10), pattern(400, rk.wc->rank(), 8)) << "rank " << rk.wc->rank();
    EXPECT_EQ(rk.read(11), pattern(400, rk.wc->rank(), 9)) << "rank " << rk.wc->rank();
  }
  EXPECT_EQ((*sc)->stats().stores_ok, 2u);  // w and c; a's store was stale
  EXPECT_EQ((*sc)->stats().loads_ok, 1u);
  EXPECT_EQ((*sc)->stats().rejected_results, 0u);
  EXPECT_EQ((*sc)->jobs_in_flight(), 0u);
  ASSERT_TRUE((*sc)->shutdown(5s).ok());

  // The publisher: w stored, the reset, c stored, shutdown.
  const auto batches = replay_batches((*sc)->kv_events_replay_endpoint(), 0);
  std::vector<std::vector<std::string>> types;
  for (const auto& [seq, batch] : batches) types.push_back(event_types(batch));
  const std::vector<std::vector<std::string>> expected{
      {"BlockStored"}, {"AllBlocksCleared"}, {"BlockStored"}, {"AllBlocksCleared"}};
  EXPECT_EQ(types, expected);

  // The record replays without a divergence, and diverges once its reset is taken out.
  auto rec = the_record_in(dir);
  ASSERT_TRUE(rec.ok()) << rec.error().to_string();
  auto same = record::replay(*rec, {});
  ASSERT_TRUE(same.ok()) << same.error().to_string();
  EXPECT_FALSE(same->first.has_value()) << record::describe(*same->first);
  EXPECT_EQ(same->steps, 6u);
  auto& evs = rec->events;
  const auto resets = std::erase_if(evs, [](const record::record_event& e) {
    return std::holds_alternative<record::reset_event>(e);
  });
  EXPECT_EQ(resets, 1u);
  auto without = record::replay(*rec, {});
  ASSERT_TRUE(without.ok()) << without.error().to_string();
  ASSERT_TRUE(without->first.has_value());
  EXPECT_EQ(without->first->step, 4u) << record::describe(*without->first);
}

TEST(EmbedConfigTest, BadConfigsAreRefusedBeforeAnythingStarts) {
  scheduler_connector_config s;
  s.token = "t";
  s.pool = {.instance = "cfg", .slots_per_rank = 4, .slot_bytes = 64};
  EXPECT_TRUE(validate(s).ok());
  auto bad = s;
  bad.transport = step_transport::memory;  // serves this process only, but listen is on
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad.listen = false;
  EXPECT_TRUE(validate(bad).ok());
  bad = s;
  bad.token.clear();
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad = s;
  bad.pool.instance = "a/b";
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad = s;
  bad.planner.manager.capacity = 5;  // differs from slots_per_rank
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad = s;
  bad.planner.offloaded_block_size = 24;  // not a multiple of the GPU block size 16
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad = s;
  bad.topology.tp_size = 0;
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  EXPECT_EQ(scheduler_connector::create(bad).code(), errc::invalid_argument);
  bad = s;
  bad.observe.kv_events_replay_endpoint = "tcp://127.0.0.1:*";  // without a PUB endpoint
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad.observe.kv_events_endpoint = "tcp://127.0.0.1:*";
  EXPECT_TRUE(validate(bad).ok());
  bad.observe.kv_events_buffer = 0;
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);
  bad = s;
  bad.observe.kv_events_endpoint = "tcp://127.0.0.1:*";
  bad.planner.manager.enable_events = false;
  EXPECT_EQ(validate(bad).code(), errc::invalid_argument);

  worker_connector_config w;
  w.token = "t";
  w.pool = s.pool;
  w.network.port = 1;
  EXPECT_TRUE(validate(w).ok());
  auto wb = w;
  wb.network.port = 0;  // the port the scheduler side published in the node's segment
  EXPECT_TRUE(validate(wb).ok());
  wb.join_timeout = std::chrono::milliseconds{0};
  EXPECT_EQ(validate(wb).code(), errc::invalid_argument);
  wb = w;
  wb.block_size_factor = 0;
  EXPECT_EQ(validate(wb).code(), errc::invalid_argument);
  wb = w;
  wb.pool.slot_bytes = 0;
  EXPECT_EQ(validate(wb).code(), errc::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Transports, EmbedTest,
                         ::testing::Values(step_transport::zmq, step_transport::memory),
                         [](const ::testing::TestParamInfo<step_transport>& info) {
                           return std::string{info.param == step_transport::zmq ? "zmq" : "memory"};
                         });

}  // namespace
}  // namespace kvc::embed
