// example_engine: the KV-connector calls an inference engine makes, in order, for a few requests
// (docs/embedding.md walks through them). It uses only the installed embedding API
// (kvconnect::kvconnect); tests/embed/find_package_project builds this same file against an
// installed kvconnect.
//
// The engine is two parts behind the engine seam (actors/embed/engine.hpp), and main() holds
// them through its interfaces only:
//   toy_scheduler (an embed::scheduler_engine): the engine's scheduler thread. It schedules the
//     requests, drives the scheduler_connector and checks the run.
//   toy_rank (an embed::rank_engine), one per TP rank: a worker, on a thread of its own (in a
//     real engine, a process of its own with mode = connect). It owns the rank's GPU KV cache
//     and runs each step's worker calls around the toy model's forward (embed::run_worker_step).
// Between them, the `executor` hands each step's model input to every rank and collects their
// outputs, as vLLM's executor hands SchedulerOutput to its workers and waits for their
// ModelRunnerOutput.
//
// The toy model has no GPU prefix cache, so every request asks the connector for CPU hits:
//   "a": a 16-token prompt. Prefill, 2 offloaded blocks are stored (submitted one step later),
//        the request finishes with delay_free and its blocks are freed at finished_sending.
//   "b": the same 16 tokens + 4 more. 16 tokens hit in the CPU pool, are loaded asynchronously
//        into b's fresh GPU blocks, and each rank checks they hold a's bytes before b runs.
//   "c": an unrelated prompt, computed from scratch.
// Exit code 0 when every request finished and b's loaded KV matched byte for byte on every rank.
// With --fail-load, rank 1's first load fails (an injected copy fault, docs/faults.md): the
// rank reports its failed blocks and the engine fails ("example engine: failed: ...", exit 1).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "actors/embed/engine.hpp"
#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"

namespace {

using namespace std::chrono_literals;
using kvc::block_key;
using kvc::errc;
using kvc::gpu_block;
using kvc::make_error;
using kvc::status;
namespace embed = kvc::embed;
namespace sched = kvc::scheduler;

constexpr uint32_t tp_size = 2;
constexpr uint32_t block_tokens = 4;  // tokens per GPU block (and per block hash)
constexpr uint32_t factor = 2;        // GPU blocks per offloaded block: 8 tokens
constexpr uint32_t token_bytes = 16;  // KV bytes of one token on one rank (one layer)
constexpr uint32_t num_gpu_blocks = 32;
constexpr uint64_t page_bytes = uint64_t{block_tokens} * token_bytes;
// How long a call that waits for the other side (the ranks, a step's metadata, a step's
// output, the shutdown) waits before it fails: far more than this engine's steps take.
constexpr auto wait_limit = 5s;

uint64_t mix(uint64_t x) {
  return block_key::mix(x);
}

/// The toy model's KV of a token: a function of the tokens up to it (its prefix hash) and rank.
void token_kv(uint64_t prefix_hash, kvc::rank_id rank, std::byte* out) {
  for (uint32_t i = 0; i < token_bytes; i += 8) {
    const uint64_t v = mix(prefix_hash ^ mix(rank + 1) ^ i);
    std::memcpy(out + i, &v, 8);
  }
}

// --- the executor: the scheduler's model input to the ranks, their outputs back ---------------

/// One request of a step's model input, as the toy model needs it (vLLM's NewRequestData /
/// CachedRequestData): its GPU blocks and the model's state of its tokens.
struct scheduled_tokens {
  std::string id;
  std::vector<gpu_block> blocks;  // the request's block table
  std::vector<uint64_t> prefix;   // prefix[p]: hash of tokens [0, p], the token's KV input
  uint32_t compute_from = 0;      // the forward writes the KV of tokens [compute_from, compute_to)
  uint32_t compute_to = 0;
  uint32_t loaded = 0;  // tokens [0, loaded) came from the CPU pool since the request last ran:
                        // the rank checks them before the forward
};

/// What every rank gets for one step (vLLM's SchedulerOutput).
struct model_input {
  kvc::step_id step = 0;
  std::vector<scheduled_tokens> requests;  // empty: nothing to compute, the transfers finish
  std::vector<std::string> finished;       // the requests finished in the previous step
};

/// What a rank gives back for its step (vLLM's ModelRunnerOutput, as far as the example checks).
struct model_output {
  status error = status::success();  // the step's first failure, naming the rank and the call
  uint64_t checked_bytes = 0;        // loaded KV bytes found equal to the model's
};

/// Hands each step's model input to every rank and waits for all of their outputs, one step at
/// a time. Thread-safe: the scheduler thread calls execute and close, rank r's thread next(r)
/// and done(r).
class executor {
 public:
  explicit executor(uint32_t ranks) : taken_(ranks, 0), outputs_(ranks) {}

  /// The step's input to every rank; returns once each gave its output (in rank order).
  std::vector<model_output> execute(model_input input) {
    std::unique_lock lock{mu_};
    input_ = std::move(input);
    for (auto& out : outputs_) out.reset();
    ++published_;
    input_ready_.notify_all();
    output_ready_.wait(lock, [this] {
      return std::ranges::all_of(outputs_, [](const auto& out) { return out.has_value(); });
    });
    std::vector<model_output> outputs;
    for (auto& out : outputs_) outputs.push_back(std::move(*out));
    return outputs;
  }
  /// No more steps: every rank's next() returns none from now on.
  void close() {
    {
      const std::lock_guard lock{mu_};
      closed_ = true;
    }
    input_ready_.notify_all();
  }
  /// Rank r: waits for the next step's input; none once the executor is closed.
  std::optional<model_input> next(kvc::rank_id r) {
    std::unique_lock lock{mu_};
    input_ready_.wait(lock, [&] { return closed_ || taken_[r] < published_; });
    if (taken_[r] == published_) return std::nullopt;
    ++taken_[r];
    return input_;
  }
  /// Rank r: its output of the step it took last.
  void done(kvc::rank_id r, model_output out) {
    {
      const std::lock_guard lock{mu_};
      outputs_[r] = std::move(out);
    }
    output_ready_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable input_ready_;
  std::condition_variable output_ready_;
  model_input input_;
  uint64_t published_ = 0;       // steps handed out so far
  std::vector<uint64_t> taken_;  // per rank: steps it took
  std::vector<std::optional<model_output>> outputs_;
  bool closed_ = false;
};

// --- the rank side: one worker ---------------------------------------------------------------

/// One TP rank: its GPU KV cache (one layer: num_gpu_blocks pages of block_tokens tokens) and
/// each step's worker calls in vLLM's order around the toy model's forward.
class toy_rank final : public embed::rank_engine {
 public:
  explicit toy_rank(executor& ex) : executor_(ex) {}

  status prepare(embed::worker_connector& wc) override {
    auto buf = wc.copy_engine().allocate_device(num_gpu_blocks * page_bytes);
    if (!buf) return buf.error();
    kv_ = static_cast<std::byte*>(buf->data);
    // One layer: (num_blocks, block_size, token_bytes) of 1-byte elements.
    const kvc::cuda::kv_tensor_desc desc{reinterpret_cast<uintptr_t>(kv_),
                                         {num_gpu_blocks, block_tokens, token_bytes},
                                         {static_cast<int64_t>(page_bytes), token_bytes, 1},
                                         1,
                                         /*block_dim=*/0};
    return wc.register_kv_caches({&desc, 1});
  }

  /// Every step the executor hands out, until it is closed.
  status run(embed::worker_connector& wc) override {
    while (std::optional<model_input> input = executor_.next(wc.rank())) {
      executor_.done(wc.rank(), step(wc, *input));
    }
    return status::success();
  }

 private:
  /// embed::run_worker_step: bind, handle_preemptions, start_load_kv, the forward,
  /// wait_for_save, get_finished, get_block_ids_with_load_errors, clear.
  model_output step(embed::worker_connector& wc, const model_input& input) {
    model_output out;
    embed::worker_step_hooks hooks{.finished_ids = &input.finished};
    hooks.forward = [&](const status&) { return forward(wc, input, out.checked_bytes); };
    // A step that computes nothing has no forward to overlap the copies with: the worker
    // finishes them now, so an idle engine drains in a known number of steps.
    if (input.requests.empty()) hooks.after_save = [&] { return wc.finish_transfers(); };
    const embed::worker_step_outcome done =
        embed::run_worker_step(wc, input.step, wait_limit, hooks);
    const std::string where =
        "rank " + std::to_string(wc.rank()) + ": step " + std::to_string(input.step) + ": ";
    if (!done.first_error) {
      const std::string_view call =
          done.failed_call == "after_save" ? "finish_transfers" : done.failed_call;
      out.error = make_error(done.first_error.code(),
                             where + std::string{call} + ": " + done.first_error.message());
    } else if (!done.load_errors.empty()) {
      out.error = make_error(errc::device_error, where + std::to_string(done.load_errors.size()) +
                                                     " block(s) failed to load");
    }
    return out;
  }

  /// The forward: checks each request's loaded tokens, then writes the KV of the tokens it
  /// computes into the request's blocks.
  status forward(embed::worker_connector& wc, const model_input& input, uint64_t& checked) {
    std::byte want[token_bytes];
    std::byte got[token_bytes];
    for (const scheduled_tokens& r : input.requests) {
      for (uint32_t p = 0; p < r.loaded; ++p) {
        token_kv(r.prefix[p], wc.rank(), want);
        if (auto st = wc.copy_engine().download(got, token(r, p), token_bytes); !st) return st;
        if (std::memcmp(want, got, token_bytes) != 0) {
          return make_error(errc::internal, r.id + ": loaded token " + std::to_string(p) +
                                                " differs on rank " + std::to_string(wc.rank()));
        }
        checked += token_bytes;
      }
      for (uint32_t p = r.compute_from; p < r.compute_to; ++p) {
        token_kv(r.prefix[p], wc.rank(), want);
        if (auto st = wc.copy_engine().upload(token(r, p), want, token_bytes); !st) return st;
      }
    }
    return status::success();
  }

  /// Where token p of request r lives in this rank's KV cache.
  std::byte* token(const scheduled_tokens& r, uint32_t p) const {
    return kv_ + r.blocks[p / block_tokens] * page_bytes + (p % block_tokens) * token_bytes;
  }

  executor& executor_;
  std::byte* kv_ = nullptr;  // allocated by the rank's copy engine, freed with it
};

// --- the scheduler side: requests, steps, checks ---------------------------------------------

struct request {
  std::string id;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> prefix;   // prefix[p]: hash of tokens [0, p]
  std::vector<block_key> hashes;  // one per full GPU block (vLLM's block_hashes)
  std::vector<gpu_block> blocks;
  uint32_t computed = 0;
  uint32_t max_new = 1;
  uint32_t outputs = 0;
  bool loading = false;  // waiting for its async load
  bool load_done = false;
  uint32_t load_to = 0;  // tokens [0, load_to) come from the CPU pool
  bool done = false;

  void append(uint32_t t) {
    prefix.push_back(mix((prefix.empty() ? 0 : prefix.back()) * 31 + t + 1));
    tokens.push_back(t);
    if (tokens.size() % block_tokens == 0) hashes.push_back({prefix.back(), prefix.back() ^ 7});
  }
  sched::request_view view() const { return {id, hashes, static_cast<uint32_t>(tokens.size())}; }
};

/// The engine's scheduler thread: requests "a", then "b" and "c", each step scheduled, planned
/// (build_connector_meta), executed by the ranks and its output applied.
class toy_scheduler final : public embed::scheduler_engine {
 public:
  explicit toy_scheduler(executor& ex) : executor_(ex) {
    for (gpu_block b = num_gpu_blocks - 1; b >= 1; --b) free_.push_back(b);  // 0 is null
  }

  void configure(embed::scheduler_connector_config& cfg) const override {
    cfg.pool.slot_bytes = factor * page_bytes;  // one offloaded block of one rank
    cfg.planner.gpu_block_size = block_tokens;
    cfg.planner.offloaded_block_size = block_tokens * factor;
    cfg.planner.hash_block_size = block_tokens;
  }

  int run(embed::scheduler_connector& sc) override {
    if (auto st = run_requests(sc); !st) {
      std::printf("example engine: failed: %s\n", st.to_string().c_str());
      return 1;
    }
    const auto& stats = sc.stats();
    std::printf("example engine: ok (%llu store jobs, %llu load jobs, %llu loaded bytes checked)\n",
                static_cast<unsigned long long>(stats.stores_ok),
                static_cast<unsigned long long>(stats.loads_ok),
                static_cast<unsigned long long>(checked_bytes_));
    return 0;
  }

 private:
  status run_requests(embed::scheduler_connector& sc) {
    if (auto st = sc.wait_for_workers(wait_limit); !st) return st;
    std::printf("%u workers registered; pool %s\n", tp_size, sc.segment_name().c_str());
    std::vector<uint32_t> prompt(16);
    for (uint32_t i = 0; i < 16; ++i) prompt[i] = 10 + i;
    add("a", prompt, 1);
    if (auto st = run_until_idle(sc); !st) return st;
    std::vector<uint32_t> longer = prompt;
    for (uint32_t t : {90u, 91u, 92u, 93u}) longer.push_back(t);
    add("b", longer, 2);
    add("c", {7, 7, 7, 7, 7, 7, 7, 7, 7}, 2);
    if (auto st = run_until_idle(sc); !st) return st;
    if (checked_bytes_ == 0) return make_error(errc::internal, "nothing was loaded");
    return status::success();
  }

  void add(std::string id, std::vector<uint32_t> prompt, uint32_t max_new) {
    auto r = std::make_unique<request>();
    r->id = std::move(id);
    r->max_new = max_new;
    for (uint32_t t : prompt) r->append(t);
    waiting_.push_back(r.get());
    requests_.push_back(std::move(r));
  }

  /// Steps until every request finished and its stores drained. A step that computes nothing
  /// finishes the copies in flight, so this takes a few steps; 100 means it is broken.
  status run_until_idle(embed::scheduler_connector& sc) {
    for (int steps = 0; !idle(sc); ++steps) {
      if (steps == 100) return make_error(errc::internal, "the requests did not all finish");
      if (auto st = step(sc); !st) return st;
    }
    return status::success();
  }

  bool idle(const embed::scheduler_connector& sc) const {
    return std::ranges::all_of(requests_, [](const auto& r) { return r->done; }) &&
           sc.jobs_in_flight() == 0;
  }

  /// One engine step: schedule, plan, execute on the ranks, apply the output.
  status step(embed::scheduler_connector& sc) {
    const kvc::step_id s = ++step_;
    std::vector<sched::scheduled_request> fresh;
    std::vector<sched::scheduled_request> cached;
    model_input input{.step = s, .requests = {}, .finished = std::move(finished_prev_)};
    finished_prev_.clear();

    // Running requests decode one token each (their blocks were allocated up front).
    for (request* r : running_) {
      const uint32_t n = static_cast<uint32_t>(r->tokens.size()) - r->computed;
      cached.push_back({r->view(), {}, r->computed, n});
      input.requests.push_back(tokens_of(*r, n, 0));
    }
    // Waiting requests: ask the connector for CPU hits, allocate, maybe load first.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request& r = **it;
      const uint32_t ntok = static_cast<uint32_t>(r.tokens.size());
      uint32_t loaded = 0;  // tokens loaded for it, which the ranks check in this step
      if (r.loading) {
        if (!r.load_done) {
          ++it;
          continue;
        }
        r.loading = false;
        r.computed = r.load_to == ntok ? ntok - 1 : r.load_to;  // recompute at least one token
        loaded = r.load_to;
      } else {
        const sched::match_result m = sc.get_num_new_matched_tokens(r.view(), 0);
        if (!m.tokens) {  // the hit blocks are being loaded for another request: next step
          ++it;
          continue;
        }
        const uint32_t need = (ntok + r.max_new + block_tokens - 1) / block_tokens;
        if (free_.size() < need) break;
        r.blocks.assign(free_.end() - need, free_.end());
        free_.resize(free_.size() - need);
        const uint32_t ext = *m.tokens;
        if (auto st = sc.update_state_after_alloc(r.view(), r.blocks, ext); !st) return st;
        std::printf("step %llu: %s: %u of %u tokens hit in the CPU pool%s\n",
                    static_cast<unsigned long long>(s), r.id.c_str(), ext, ntok,
                    ext > 0 ? " (async load)" : "");
        if (ext > 0) {
          r.loading = true;
          r.load_to = ext;
          ++it;
          continue;
        }
      }
      const uint32_t n = ntok - r.computed;
      fresh.push_back({r.view(), r.blocks, r.computed, n});
      input.requests.push_back(tokens_of(r, n, loaded));
      running_.push_back(&r);
      it = waiting_.erase(it);
    }

    // 1. Plan the step; the metadata goes to every worker through the step channel.
    auto meta = sc.build_connector_meta(
        {.step = s, .new_requests = fresh, .cached_requests = cached, .preempted = {}});
    if (!meta) return meta.error();
    if (!meta->loads.empty() || !meta->stores.empty()) {
      std::printf("step %llu: build_connector_meta: %zu load(s), %zu store(s)\n",
                  static_cast<unsigned long long>(s), meta->loads.size(), meta->stores.size());
    }

    // 2. The ranks run the step (toy_rank::step) and give back their outputs.
    for (const model_output& out : executor_.execute(input)) {
      if (!out.error) return out.error;
      checked_bytes_ += out.checked_bytes;
    }
    for (const scheduled_tokens& t : input.requests) {
      if (t.loaded == 0) continue;
      std::printf("step %llu: %s: %u loaded tokens match byte for byte on %u ranks\n",
                  static_cast<unsigned long long>(s), t.id.c_str(), t.loaded, tp_size);
    }

    // 3. The aggregated output of this step (every rank has reported it by now).
    auto upd = sc.update_connector_output(s, wait_limit);
    if (!upd) return upd.error();
    for (const auto& id : upd->completions.finished_recving) {
      std::printf("step %llu: finished_recving %s\n", static_cast<unsigned long long>(s),
                  id.c_str());
      find(id).load_done = true;
    }
    for (const auto& id : upd->completions.finished_sending) {
      std::printf("step %llu: finished_sending %s: its blocks are freed\n",
                  static_cast<unsigned long long>(s), id.c_str());
      release(find(id));
    }
    if (!upd->completions.invalid_block_ids.empty()) {
      return make_error(errc::device_error,
                        "step " + std::to_string(s) + ": the connector reported invalid blocks");
    }

    // 4. Model output: one new token per computed request; finished requests.
    for (const scheduled_tokens& t : input.requests) {
      request& r = find(t.id);
      r.computed = t.compute_to;
      r.append(1000 + static_cast<uint32_t>(r.prefix.back() % 1000));
      if (++r.outputs < r.max_new) continue;
      std::erase(running_, &r);
      finished_prev_.push_back(r.id);
      const bool delay_free = sc.request_finished(r.id);
      std::printf("step %llu: request_finished %s: delay_free=%s\n",
                  static_cast<unsigned long long>(s), r.id.c_str(), delay_free ? "true" : "false");
      if (!delay_free) release(r);
    }
    for (const auto& ev : sc.take_events()) {
      std::printf("step %llu: event %s %zu block(s) on %s\n", static_cast<unsigned long long>(s),
                  std::string(kvc::to_string(ev.kind)).c_str(), ev.keys.size(),
                  std::string(kvc::to_string(ev.where)).c_str());
    }
    return status::success();
  }

  /// Request r's part of the model input: its next n tokens to compute and, when it was just
  /// loaded, its first `loaded` tokens to check.
  static scheduled_tokens tokens_of(const request& r, uint32_t n, uint32_t loaded) {
    return {.id = r.id,
            .blocks = r.blocks,
            .prefix = r.prefix,
            .compute_from = r.computed,
            .compute_to = r.computed + n,
            .loaded = loaded};
  }

  request& find(const std::string& id) {
    for (auto& r : requests_) {
      if (r->id == id) return *r;
    }
    std::abort();  // the connector only names requests it was given
  }

  void release(request& r) {
    free_.insert(free_.end(), r.blocks.begin(), r.blocks.end());
    r.blocks.clear();
    r.done = true;
  }

  executor& executor_;
  std::vector<std::unique_ptr<request>> requests_;
  std::vector<request*> waiting_;
  std::vector<request*> running_;
  std::vector<gpu_block> free_;
  std::vector<std::string> finished_prev_;
  kvc::step_id step_ = 0;
  uint64_t checked_bytes_ = 0;
};

// --- main: the facades set up, the engine's parts held through the seam ----------------------

int fail(const char* what, const status& st) {
  std::printf("example engine: failed: %s: %s\n", what, st.to_string().c_str());
  return 1;
}

int run(bool fail_load) {
  executor ex{tp_size};
  const std::unique_ptr<embed::scheduler_engine> scheduler = std::make_unique<toy_scheduler>(ex);

  // The scheduler side: hosts the scheduler + coordinator actors in this process. listen = false:
  // only this process's workers register (an engine with worker processes keeps it on and
  // gives them port()).
  embed::scheduler_connector_config sc_cfg;
  sc_cfg.listen = false;
  sc_cfg.token = "example-token";
  sc_cfg.topology.tp_size = tp_size;
  sc_cfg.pool.instance = "example" + std::to_string(::getpid());
  sc_cfg.pool.slots_per_rank = 16;
  scheduler->configure(sc_cfg);
  auto sc = embed::scheduler_connector::create(sc_cfg);
  if (!sc) return fail("scheduler_connector::create", sc.error());

  // The worker side: per rank a connector, its engine part set up (the KV cache registered),
  // then the registration.
  std::vector<std::unique_ptr<embed::rank_engine>> ranks;
  std::vector<std::unique_ptr<embed::worker_connector>> workers;
  for (kvc::rank_id r = 0; r < tp_size; ++r) {
    embed::worker_connector_config wc;
    wc.mode = embed::connection_mode::in_process;
    wc.token = sc_cfg.token;
    wc.topology = sc_cfg.topology;
    wc.pool = sc_cfg.pool;
    wc.rank = r;
    wc.backend = "sim";
    wc.block_size_factor = factor;
    if (fail_load && r == 1) {
      wc.faults.specs.push_back({.kind = kvc::fault_kind::fail_copy,
                                 .rank = r,
                                 .dir = kvc::fault_target::load,
                                 .at = kvc::fault_action::fail_at_completion,
                                 .trigger = kvc::fault_trigger::nth,
                                 .nth = 0});
    }
    auto w = embed::worker_connector::prepare(wc, sc->get());
    if (!w) return fail("worker_connector::prepare", w.error());
    ranks.push_back(std::make_unique<toy_rank>(ex));
    if (auto st = ranks.back()->prepare(**w); !st) return fail("rank_engine::prepare", st);
    if (auto st = (*w)->register_with_scheduler(); !st) return fail("register_with_scheduler", st);
    workers.push_back(std::move(w).value());
  }

  // Each rank runs on its own thread (handed its connector here), the scheduler on this one;
  // once the scheduler's run ends, the executor is closed and the ranks' runs end with it.
  std::vector<status> rank_ends(tp_size, status::success());
  int code = 0;
  {
    std::vector<std::jthread> threads;
    for (kvc::rank_id r = 0; r < tp_size; ++r) {
      threads.emplace_back([&, r] { rank_ends[r] = ranks[r]->run(*workers[r]); });
    }
    code = scheduler->run(**sc);
    ex.close();
  }
  for (kvc::rank_id r = 0; r < tp_size; ++r) {
    if (!rank_ends[r]) code = fail(("rank " + std::to_string(r)).c_str(), rank_ends[r]);
  }
  // The scheduler side stops the workers (their connectors see it), then everything goes.
  auto stopped = (*sc)->shutdown(wait_limit);
  workers.clear();
  if (!stopped) return fail("shutdown", stopped.error());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  bool fail_load = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view{argv[i]} != "--fail-load") {
      std::fprintf(stderr, "usage: %s [--fail-load]\n", argv[0]);
      return 2;
    }
    fail_load = true;
  }
  return run(fail_load);
}
