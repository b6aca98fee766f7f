// `kvconnect bench planner`: the scheduler side of the connector (planner over the
// real offload manager) under a steady decode workload, with no workers: every job's result is
// fed back, successful, one step after the job was planned.
//
// Workload per request count N: N requests, each with a 1,024-token prompt whose blocks are
// already offloaded, decode one token per step (GPU block = offloaded block = 16 tokens, so each
// request fills a block every 16 steps; request phases are staggered). Every step the 4 oldest
// requests finish and 4 new ones arrive whose first 512 tokens are one of `docs` shared prefixes
// (offloaded by earlier requests) followed by 512 unique tokens: they look up, load the prefix
// (async, done the next step), then prefill and store the rest. The calls are vLLM's
// scheduler's: every request a step schedules from the waiting queue gets
// update_state_after_alloc (0 external tokens when nothing loads), and only one whose
// num_computed_tokens is 0 is looked up: not one whose load is done. Only the connector calls
// are timed (steady_clock around them, per step); the engine stand-in's own work is not. With
// --engine-bytes the stand-in also writes that much memory of its own before each step, as an
// engine's own work between steps does (vLLM's Python scheduler, the model runner), so the
// planner meets the caches such an engine leaves it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <iostream>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "actors/scheduler/forwarding_manager.hpp"
#include "actors/scheduler/planner.hpp"
#include "launch/bench/bench_commands.hpp"

namespace kvc::launch {

namespace {

using scheduler::planner;
using scheduler::request_view;
using scheduler::scheduled_request;
using scheduler::step_input;

constexpr uint32_t kBlock = 16;     // GPU block = offloaded block = hash block (tokens)
constexpr uint32_t kPrompt = 1024;  // prompt tokens
constexpr uint32_t kShared = 512;   // shared prefix tokens of arriving requests
constexpr uint32_t kTurnover = 4;   // requests finishing and arriving per step

/// Times every manager call (steady_clock) to split a step's time between the manager and the
/// connector's own work. Only used with --split: it adds two clock reads per call.
class timed_manager final : public scheduler::forwarding_manager {
 public:
  /// Keys passed to the manager (all calls, and touch calls alone).
  struct key_counts {
    uint64_t all = 0;
    uint64_t touch = 0;
  };

  timed_manager(std::unique_ptr<offload_manager> inner, std::chrono::nanoseconds& sink,
                key_counts& keys)
      : forwarding_manager(std::move(inner)), sink_(sink), keys_(keys) {}

  template <class F>
  auto timed(F&& f) -> decltype(f()) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = f();
    sink_ += std::chrono::steady_clock::now() - t0;
    return r;
  }

  bool lookup(const block_key& k) override {
    keys_.all += 1;
    return timed([&] { return inner().lookup(k); });
  }
  bool any_loading(std::span<const block_key> k) override {
    return timed([&] { return inner().any_loading(k); });
  }
  uint32_t lookup_prefix(std::span<const block_key> k) override {
    const uint32_t hits = timed([&] { return inner().lookup_prefix(k); });
    keys_.all += std::min<uint64_t>(uint64_t{hits} + 1, k.size());  // up to the first miss
    return hits;
  }
  result<std::span<const cpu_slot>> prepare_load(std::span<const block_key> k) override {
    keys_.all += k.size();
    return timed([&] { return inner().prepare_load(k); });
  }
  status complete_load(std::span<const block_key> k) override {
    keys_.all += k.size();
    return timed([&] { return inner().complete_load(k); });
  }
  void touch(std::span<const block_key> k) override {
    keys_.all += k.size();
    keys_.touch += k.size();
    timed([&] {
      inner().touch(k);
      return 0;
    });
  }
  void touch_hinted(std::span<const block_key> k, std::span<cpu_slot> hints) override {
    keys_.all += k.size();
    keys_.touch += k.size();
    timed([&] {
      inner().touch_hinted(k, hints);
      return 0;
    });
  }
  std::optional<scheduler::store_plan> prepare_store(std::span<const block_key> k) override {
    keys_.all += k.size();
    return timed([&] { return inner().prepare_store(k); });
  }
  void complete_store(std::span<const block_key> k, bool ok) override {
    keys_.all += k.size();
    timed([&] {
      inner().complete_store(k, ok);
      return 0;
    });
  }

 private:
  std::chrono::nanoseconds& sink_;
  key_counts& keys_;
};

struct planner_options {
  std::vector<uint32_t> requests{64, 256, 1024};
  uint32_t steps = 1000;
  uint32_t rounds = 3;
  uint32_t docs = 64;
  uint32_t capacity_per_request = 160;  // CPU slots per running request
  bool events = false;
  bool split = false;  // also report the time spent inside the manager (perturbs slightly)
  uint64_t engine_bytes = 0;  // written by the engine stand-in before each step (untimed)
};

/// One engine request: its block hashes (chained, extended as tokens arrive) and GPU blocks.
struct bench_request {
  std::string id;
  uint64_t serial = 0;
  uint32_t doc = 0;
  uint32_t num_tokens = 0;  // prompt + sampled tokens
  std::vector<block_key> hashes;
  std::vector<gpu_block> blocks;

  request_view view() const { return {id, hashes, num_tokens, false}; }
};

class planner_bench {
 public:
  planner_bench(const planner_options& opt, uint32_t n) : opt_(opt), n_(n) {}

  /// Runs warm-up and timed steps; fills per-step microseconds. Throws on a connector error.
  void run(std::vector<double>& step_us, scheduler::connector_stats& timed_stats,
           double& manager_us, timed_manager::key_counts& manager_keys) {
    scheduler::planner_config cfg;
    cfg.gpu_block_size = kBlock;
    cfg.offloaded_block_size = kBlock;
    cfg.hash_block_size = kBlock;
    cfg.manager.capacity = n_ * opt_.capacity_per_request;
    cfg.manager.enable_events = opt_.events;
    auto mgr = scheduler::offload_manager::create(cfg.manager);
    check(mgr.ok() ? status{} : mgr.error());
    std::unique_ptr<scheduler::offload_manager> m = std::move(*mgr);
    if (opt_.split) m = std::make_unique<timed_manager>(std::move(m), manager_time_, manager_keys_);
    auto made = planner::create(cfg, std::move(m));
    check(made.ok() ? status{} : made.error());
    planner_ = std::move(*made);

    engine_memory_.assign(opt_.engine_bytes, 0);
    populate();
    const uint32_t warmup = n_ / kTurnover + 64;
    step_us.clear();
    step_us.reserve(opt_.steps);
    scheduler::connector_stats before;
    for (uint32_t s = 0; s < warmup + opt_.steps; ++s) {
      if (s == warmup) {
        before = planner_->stats();
        manager_time_ = {};
        manager_keys_ = {};
      }
      const double us = step();
      if (s >= warmup) step_us.push_back(us);
    }
    timed_stats = diff(planner_->stats(), before);
    manager_us = std::chrono::duration<double, std::micro>(manager_time_).count();
    manager_keys = manager_keys_;
  }

 private:
  using clock = std::chrono::steady_clock;

  static void check(const status& s) {
    if (!s.ok()) throw std::runtime_error(s.to_string());
  }

  static scheduler::connector_stats diff(scheduler::connector_stats a,
                                         const scheduler::connector_stats& b) {
    a.lookups -= b.lookups;
    a.hit_blocks -= b.hit_blocks;
    a.deferred -= b.deferred;
    a.loads_planned -= b.loads_planned;
    a.load_blocks -= b.load_blocks;
    a.stores_planned -= b.stores_planned;
    a.store_blocks -= b.store_blocks;
    a.store_retries -= b.store_retries;
    a.loads_ok -= b.loads_ok;
    a.loads_failed -= b.loads_failed;
    a.stores_ok -= b.stores_ok;
    a.stores_failed -= b.stores_failed;
    a.rejected_results -= b.rejected_results;
    a.resets -= b.resets;
    a.stale_results -= b.stale_results;
    return a;
  }

  static block_key chain(uint64_t parent, uint64_t salt) {
    const uint64_t h = block_key::mix(parent ^ block_key::mix(salt));
    return {h, block_key::mix(h ^ 0x5bd1e995ULL)};
  }

  /// Hash of the next full block: shared-prefix blocks depend on the document only.
  void extend_hashes(bench_request& r) {
    while ((r.hashes.size() + 1) * kBlock <= r.num_tokens) {
      const size_t b = r.hashes.size();
      const uint64_t parent = b == 0 ? 0x9e3779b9ULL : r.hashes.back().hi;
      const uint64_t salt =
          b < kShared / kBlock ? (uint64_t{r.doc} << 32) | b : (r.serial << 20) ^ (b + 0xabcdef);
      r.hashes.push_back(chain(parent, salt));
    }
  }

  void alloc_blocks(bench_request& r) {
    while (r.blocks.size() * kBlock < r.num_tokens) {
      r.blocks.push_back(next_gpu_);
      next_gpu_ = next_gpu_ == UINT32_MAX ? 1 : next_gpu_ + 1;  // 0 is the null block
    }
  }

  std::unique_ptr<bench_request> make_request(uint32_t extra_tokens) {
    auto r = std::make_unique<bench_request>();
    r->serial = serial_++;
    r->id = "req-" + std::to_string(r->serial);
    r->doc = static_cast<uint32_t>(r->serial % opt_.docs);
    r->num_tokens = kPrompt + extra_tokens;
    r->hashes.reserve(r->num_tokens / kBlock + 64);
    extend_hashes(*r);
    return r;
  }

  /// N running requests whose prompts (and a staggered number of decoded tokens) are offloaded.
  void populate() {
    std::vector<scheduled_request> fresh;
    for (uint32_t i = 0; i < n_; ++i) {
      auto r = make_request(i % kBlock);
      (void)planner_->get_num_new_matched_tokens(r->view(), 0);
      alloc_blocks(*r);
      fresh.clear();
      fresh.push_back({r->view(), r->blocks, 0, r->num_tokens, false});
      auto meta = planner_->build_connector_meta(step_input{step_, fresh, {}, {}});
      check(meta.ok() ? status{} : meta.error());
      ++step_;
      complete_all(*meta);
      check(planner_->update_connector_output(pending_));
      ++r->num_tokens;  // the token sampled after the prefill
      extend_hashes(*r);
      running_.push_back(std::move(r));
    }
    (void)planner_->take_request_completions();
    pending_.jobs.clear();
  }

  void complete_all(const connector_metadata& meta) {
    pending_.step = meta.step;
    pending_.jobs.clear();
    for (const auto* jobs : {&meta.loads, &meta.stores}) {
      for (const auto& j : *jobs) pending_.jobs.push_back({j.id, j.kind, true});
    }
  }

  /// One engine step; returns the microseconds spent in connector calls.
  double step() {
    clock::duration spent{};
    engine_work();

    // 1. Last step's job results.
    auto t0 = clock::now();
    check(planner_->update_connector_output(pending_));
    auto done = planner_->take_request_completions();
    spent += clock::now() - t0;
    for (const auto& id : done.finished_recving) {
      auto it = loading_.find(id);
      if (it != loading_.end()) {
        promoted_.push_back(std::move(it->second));
        loading_.erase(it);
      }
    }

    // 2. The oldest requests finish; new ones arrive.
    for (uint32_t i = 0; i < kTurnover && !running_.empty(); ++i) {
      auto& r = running_.front();
      t0 = clock::now();
      (void)planner_->request_finished(r->id);
      spent += clock::now() - t0;
      running_.pop_front();
    }
    for (uint32_t i = 0; i < kTurnover; ++i) waiting_.push_back(make_request(0));

    // 3. Scheduling: promoted requests (their prefix is now on the GPU) and arrivals.
    // Only the connector calls are timed; allocating GPU blocks is the engine's work.
    fresh_.clear();
    fresh_owner_.clear();
    for (auto& r : promoted_) {
      // vLLM asks no lookup of a request whose num_computed_tokens is not 0 (its load set
      // them), and calls update_state_after_alloc for every request it schedules from waiting.
      alloc_blocks(*r);
      t0 = clock::now();
      check(planner_->update_state_after_alloc(r->view(), r->blocks, 0));
      spent += clock::now() - t0;
      fresh_.push_back({r->view(), r->blocks, kShared, r->num_tokens - kShared, false});
      fresh_owner_.push_back(std::move(r));
    }
    promoted_.clear();
    still_waiting_.clear();
    for (auto& r : waiting_) {
      t0 = clock::now();
      const auto m = planner_->get_num_new_matched_tokens(r->view(), 0);
      spent += clock::now() - t0;
      if (!m.tokens) {
        still_waiting_.push_back(std::move(r));
        continue;
      }
      alloc_blocks(*r);
      t0 = clock::now();
      const status st = planner_->update_state_after_alloc(r->view(), r->blocks, *m.tokens);
      spent += clock::now() - t0;
      check(st);
      if (*m.tokens > 0) {
        std::string id = r->id;
        loading_.emplace(std::move(id), std::move(r));
      } else {
        fresh_.push_back({r->view(), r->blocks, 0, r->num_tokens, false});
        fresh_owner_.push_back(std::move(r));
      }
    }
    waiting_.swap(still_waiting_);

    // Running requests decode one token; a new block when the last one is full.
    cached_.clear();
    for (auto& r : running_) {
      const size_t before = r->blocks.size();
      alloc_blocks(*r);
      cached_.push_back({r->view(), std::span<const gpu_block>(r->blocks).subspan(before),
                         r->num_tokens - 1, 1, false});
    }

    // 4. This step's metadata.
    t0 = clock::now();
    auto meta = planner_->build_connector_meta(step_input{step_, fresh_, cached_, {}});
    std::vector<kv_event> events;
    if (opt_.events) events = planner_->take_events();
    spent += clock::now() - t0;
    check(meta.ok() ? status{} : meta.error());
    ++step_;
    complete_all(*meta);

    // Sample: every scheduled request gains one token.
    for (auto& r : running_) {
      ++r->num_tokens;
      extend_hashes(*r);
    }
    for (auto& r : fresh_owner_) {
      ++r->num_tokens;
      extend_hashes(*r);
      running_.push_back(std::move(r));
    }
    return std::chrono::duration<double, std::micro>(spent).count();
  }

  /// The engine's own work between steps: one write per cache line of its memory.
  void engine_work() {
    for (size_t i = 0; i < engine_memory_.size(); i += 64) ++engine_memory_[i];
  }

  const planner_options& opt_;
  uint32_t n_;
  std::vector<uint8_t> engine_memory_;
  std::unique_ptr<planner> planner_;
  std::deque<std::unique_ptr<bench_request>> running_;
  std::vector<std::unique_ptr<bench_request>> waiting_;
  std::vector<std::unique_ptr<bench_request>> still_waiting_;
  std::vector<std::unique_ptr<bench_request>> promoted_;
  std::unordered_map<std::string, std::unique_ptr<bench_request>> loading_;
  std::vector<std::unique_ptr<bench_request>> fresh_owner_;
  std::vector<scheduled_request> fresh_;
  std::vector<scheduled_request> cached_;
  connector_output pending_;
  std::chrono::nanoseconds manager_time_{};
  timed_manager::key_counts manager_keys_;
  step_id step_ = 0;
  uint64_t serial_ = 0;
  gpu_block next_gpu_ = 1;
};

/// One measured run for one request count.
struct run_result {
  std::vector<double> step_us;  // sorted
  double mean_us = 0;
  double manager_us = 0;                   // total, with --split
  timed_manager::key_counts manager_keys;  // total, with --split
  scheduler::connector_stats stats;
};

run_result run_one(const planner_options& opt, uint32_t n) {
  planner_bench bench{opt, n};
  run_result r;
  bench.run(r.step_us, r.stats, r.manager_us, r.manager_keys);
  r.mean_us = std::accumulate(r.step_us.begin(), r.step_us.end(), 0.0) /
              static_cast<double>(r.step_us.size());
  std::sort(r.step_us.begin(), r.step_us.end());
  return r;
}

/// The JSON line for the best (lowest mean) of `rounds`; the other rounds' means are listed.
std::string report(const planner_options& opt, uint32_t n, const std::vector<run_result>& rounds) {
  const auto& best =
      *std::min_element(rounds.begin(), rounds.end(),
                        [](const auto& a, const auto& b) { return a.mean_us < b.mean_us; });
  const auto& sorted = best.step_us;
  auto pct = [&](double p) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(p * sorted.size()))];
  };
  const double steps = static_cast<double>(sorted.size());
  const auto& st = best.stats;
  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(2);
  o << R"({"bench":"planner","requests":)" << n << R"(,"steps":)" << sorted.size()
    << R"(,"us_per_step":)" << best.mean_us << R"(,"p50_us":)" << pct(0.50) << R"(,"p99_us":)"
    << pct(0.99) << R"(,"max_us":)" << sorted.back() << R"(,"ns_per_request_step":)"
    << best.mean_us * 1000.0 / n << R"(,"round_means_us":[)";
  for (size_t i = 0; i < rounds.size(); ++i) o << (i ? "," : "") << rounds[i].mean_us;
  o << R"(],"stores_per_step":)" << st.stores_planned / steps << R"(,"store_blocks_per_step":)"
    << st.store_blocks / steps << R"(,"loads_per_step":)" << st.loads_planned / steps
    << R"(,"load_blocks_per_step":)" << st.load_blocks / steps << R"(,"lookups_per_step":)"
    << st.lookups / steps << R"(,"deferred":)" << st.deferred << R"(,"store_retries":)"
    << st.store_retries;
  if (opt.engine_bytes > 0) o << R"(,"engine_bytes":)" << opt.engine_bytes;
  if (opt.split) {
    const double mgr = best.manager_us / steps;
    o << R"(,"manager_us_per_step":)" << mgr << R"(,"connector_us_per_step":)" << best.mean_us - mgr
      << R"(,"manager_keys_per_step":)" << best.manager_keys.all / steps
      << R"(,"touch_keys_per_step":)" << best.manager_keys.touch / steps;
  }
  o << "}";
  return o.str();
}

}  // namespace

void add_bench_planner_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<planner_options>();
  auto* cmd = bench_group(app).add_subcommand(
      "planner", "Scheduler-side connector under a steady decode workload (JSON line per N)");
  cmd->add_option("--requests", opt->requests, "Running request counts to measure")
      ->delimiter(',')
      ->check(CLI::Range(1u, 100000u));
  cmd->add_option("--steps", opt->steps, "Timed steps per request count")
      ->check(CLI::Range(1u, 10'000'000u));
  cmd->add_option("--rounds", opt->rounds, "Runs per request count; the best mean is reported")
      ->check(CLI::Range(1u, 100u));
  cmd->add_option("--docs", opt->docs, "Distinct shared 512-token prefixes")
      ->check(CLI::Range(1u, 1'000'000u));
  cmd->add_option("--capacity-per-request", opt->capacity_per_request,
                  "CPU slots per running request")
      ->check(CLI::Range(80u, 100'000u));
  cmd->add_flag("--events", opt->events, "Record kv events and take them every step");
  cmd->add_option("--engine-bytes", opt->engine_bytes,
                  "Memory the engine stand-in writes before each step, untimed (its own work "
                  "between steps; 0: none)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 34));
  cmd->add_flag("--split", opt->split,
                "Also time the manager calls (manager_us_per_step; adds clock reads)");
  cmd->callback([opt, &exit_code] {
    try {
      // Rounds interleave the request counts, so a noisy phase of a shared machine hits all of
      // them alike; each line reports the best round.
      std::vector<std::vector<run_result>> results(opt->requests.size());
      for (uint32_t round = 0; round < opt->rounds; ++round) {
        for (size_t i = 0; i < opt->requests.size(); ++i)
          results[i].push_back(run_one(*opt, opt->requests[i]));
      }
      for (size_t i = 0; i < opt->requests.size(); ++i)
        std::cout << report(*opt, opt->requests[i], results[i]) << std::endl;
      exit_code = 0;
    } catch (const std::exception& e) {
      std::cerr << "kvconnect bench planner: " << e.what() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace kvc::launch
