// example_engine: the KV-connector calls an inference engine makes, in order, for a few requests
// (docs/embedding.md walks through them). It uses only the installed embedding API
// (kvconnect::kvconnect); tests/embed/find_package_project builds this same file against an
// installed kvconnect.
//
// One process plays the engine: a scheduler_connector (the engine's scheduler thread) and one
// worker_connector per TP rank (the engine's workers, here driven in turn by the same thread;
// in a real engine each runs in its own process with mode = connect). The toy model has no GPU
// prefix cache, so every request asks the connector for CPU hits:
//   "a": a 16-token prompt. Prefill, 2 offloaded blocks are stored (submitted one step later),
//        the request finishes with delay_free and its blocks are freed at finished_sending.
//   "b": the same 16 tokens + 4 more. 16 tokens hit in the CPU pool, are loaded asynchronously
//        into b's fresh GPU blocks, and the engine checks they hold a's bytes before b runs.
//   "c": an unrelated prompt, computed from scratch.
// Exit code 0 when every request finished and b's loaded KV matched byte for byte.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "actors/embed/scheduler_connector.hpp"
#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"

namespace {

using namespace std::chrono_literals;
using kvc::block_key;
using kvc::gpu_block;
namespace embed = kvc::embed;
namespace sched = kvc::scheduler;

constexpr uint32_t tp_size = 2;
constexpr uint32_t block_tokens = 4;  // tokens per GPU block (and per block hash)
constexpr uint32_t factor = 2;        // GPU blocks per offloaded block: 8 tokens
constexpr uint32_t token_bytes = 16;  // KV bytes of one token on one rank (one layer)
constexpr uint32_t num_gpu_blocks = 32;
constexpr uint64_t page_bytes = uint64_t{block_tokens} * token_bytes;

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
  uint32_t load_from = 0;  // tokens [load_from, load_to) come from the CPU pool
  uint32_t load_to = 0;
  bool scheduled_before = false;
  bool done = false;

  void append(uint32_t t) {
    prefix.push_back(mix((prefix.empty() ? 0 : prefix.back()) * 31 + t + 1));
    tokens.push_back(t);
    if (tokens.size() % block_tokens == 0) hashes.push_back({prefix.back(), prefix.back() ^ 7});
  }
  sched::request_view view() const { return {id, hashes, static_cast<uint32_t>(tokens.size())}; }
};

class toy_engine {
 public:
  toy_engine(embed::scheduler_connector& sc,
             std::vector<std::unique_ptr<embed::worker_connector>>& workers,
             std::vector<kvc::cuda::device_buffer>& kv)
      : sc_(sc), workers_(workers), kv_(kv) {
    for (gpu_block b = num_gpu_blocks - 1; b >= 1; --b) free_.push_back(b);  // 0 is null
  }

  void add(std::string id, std::vector<uint32_t> prompt, uint32_t max_new) {
    auto r = std::make_unique<request>();
    r->id = std::move(id);
    r->max_new = max_new;
    for (uint32_t t : prompt) r->append(t);
    waiting_.push_back(r.get());
    requests_.push_back(std::move(r));
  }

  bool idle() const {
    for (const auto& r : requests_) {
      if (!r->done) return false;
    }
    return sc_.jobs_in_flight() == 0;
  }

  /// One engine step: schedule, plan, run the workers around the forward, apply the output.
  bool step() {
    const kvc::step_id s = ++step_;
    std::vector<sched::scheduled_request> fresh;
    std::vector<sched::scheduled_request> cached;
    std::vector<std::pair<request*, uint32_t>> compute;  // request, tokens to compute

    // Running requests decode one token each (their blocks were allocated up front).
    for (request* r : running_) {
      const uint32_t n = static_cast<uint32_t>(r->tokens.size()) - r->computed;
      cached.push_back({r->view(), {}, r->computed, n});
      compute.emplace_back(r, n);
    }
    // Waiting requests: ask the connector for CPU hits, allocate, maybe load first.
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request& r = **it;
      const uint32_t ntok = static_cast<uint32_t>(r.tokens.size());
      if (r.loading) {
        if (!r.load_done) {
          ++it;
          continue;
        }
        r.loading = false;
        r.computed = r.load_to == ntok ? ntok - 1 : r.load_to;  // recompute at least one token
        if (!check_loaded(r)) return false;
      } else {
        const sched::match_result m = sc_.get_num_new_matched_tokens(r.view(), 0);
        if (!m.tokens) {  // the hit blocks are being loaded for another request: next step
          ++it;
          continue;
        }
        const uint32_t need = (ntok + r.max_new + block_tokens - 1) / block_tokens;
        if (free_.size() < need) break;
        r.blocks.assign(free_.end() - need, free_.end());
        free_.resize(free_.size() - need);
        const uint32_t ext = *m.tokens;
        if (auto st = sc_.update_state_after_alloc(r.view(), r.blocks, ext); !st) {
          return fail("update_state_after_alloc", st);
        }
        std::printf("step %llu: %s: %u of %u tokens hit in the CPU pool%s\n",
                    static_cast<unsigned long long>(s), r.id.c_str(), ext, ntok,
                    ext > 0 ? " (async load)" : "");
        if (ext > 0) {
          r.loading = true;
          r.load_from = 0;
          r.load_to = ext;
          ++it;
          continue;
        }
      }
      const uint32_t n = ntok - r.computed;
      fresh.push_back({r.view(), r.blocks, r.computed, n});
      compute.emplace_back(&r, n);
      running_.push_back(&r);
      it = waiting_.erase(it);
    }

    // 1. Plan the step; the metadata goes to every worker through the actors.
    auto meta = sc_.build_connector_meta(
        {.step = s, .new_requests = fresh, .cached_requests = cached, .preempted = {}});
    if (!meta) return fail("build_connector_meta", meta.error());
    if (!meta->loads.empty() || !meta->stores.empty()) {
      std::printf("step %llu: build_connector_meta: %zu load(s), %zu store(s)\n",
                  static_cast<unsigned long long>(s), meta->loads.size(), meta->stores.size());
    }

    // 2. Every worker, in vLLM's order around the forward (embed::run_worker_step: bind,
    //    handle_preemptions, start_load_kv, the forward, wait_for_save, get_finished,
    //    get_block_ids_with_load_errors, clear).
    for (auto& w : workers_) {
      embed::worker_step_hooks hooks{.finished_ids = &finished_prev_};
      hooks.forward = [&](const kvc::status&) {
        for (auto& [r, n] : compute) forward(*w, *r, r->computed, n);
        return kvc::status::success();
      };
      // A step that computes nothing has no forward to overlap the copies with: the worker
      // finishes them now, so an idle engine drains in a known number of steps.
      if (compute.empty()) hooks.after_save = [&] { return w->finish_transfers(); };
      const auto out = embed::run_worker_step(*w, s, 5s, hooks);
      if (!out.first_error) {
        const std::string what{out.failed_call == "after_save" ? "finish_transfers"
                                                                : out.failed_call};
        return fail(what.c_str(), out.first_error);
      }
      if (!out.load_errors.empty()) {
        std::printf("rank %u: %zu blocks failed to load\n", w->rank(), out.load_errors.size());
        return false;
      }
    }
    finished_prev_.clear();

    // 3. The aggregated output of this step (every rank has reported it by now).
    auto upd = sc_.update_connector_output(s, 5s);
    if (!upd) return fail("update_connector_output", upd.error());
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
      std::printf("step %llu: invalid blocks reported\n", static_cast<unsigned long long>(s));
      return false;
    }

    // 4. Model output: one new token per computed request; finished requests.
    for (auto& [r, n] : compute) {
      r->computed += n;
      r->append(1000 + static_cast<uint32_t>(r->prefix.back() % 1000));
      if (++r->outputs < r->max_new) continue;
      std::erase(running_, r);
      finished_prev_.push_back(r->id);
      const bool delay_free = sc_.request_finished(r->id);
      std::printf("step %llu: request_finished %s: delay_free=%s\n",
                  static_cast<unsigned long long>(s), r->id.c_str(), delay_free ? "true" : "false");
      if (!delay_free) release(*r);
    }
    for (const auto& ev : sc_.take_events()) {
      std::printf("step %llu: event %s %zu block(s) on %s\n", static_cast<unsigned long long>(s),
                  std::string(kvc::to_string(ev.kind)).c_str(), ev.keys.size(),
                  std::string(kvc::to_string(ev.where)).c_str());
    }
    return true;
  }

  uint64_t checked_bytes() const { return checked_bytes_; }

 private:
  static bool fail(const char* what, const kvc::status& st) {
    std::printf("%s: %s\n", what, st.to_string().c_str());
    return false;
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

  std::byte* token_ptr(kvc::rank_id rank, gpu_block b, uint32_t slot) const {
    return static_cast<std::byte*>(kv_[rank].data) + b * page_bytes + slot * token_bytes;
  }

  /// The forward of one rank: writes the KV of tokens [from, from + n) into the request's blocks.
  void forward(embed::worker_connector& w, const request& r, uint32_t from, uint32_t n) {
    std::byte buf[token_bytes];
    for (uint32_t p = from; p < from + n; ++p) {
      token_kv(r.prefix[p], w.rank(), buf);
      (void)w.copy_engine().upload(
          token_ptr(w.rank(), r.blocks[p / block_tokens], p % block_tokens), buf, token_bytes);
    }
  }

  /// The loaded tokens must hold exactly the KV the model computes for them, on every rank.
  bool check_loaded(const request& r) {
    std::byte want[token_bytes];
    std::byte got[token_bytes];
    for (auto& w : workers_) {
      for (uint32_t p = r.load_from; p < r.load_to; ++p) {
        token_kv(r.prefix[p], w->rank(), want);
        if (auto st = w->copy_engine().download(
                got, token_ptr(w->rank(), r.blocks[p / block_tokens], p % block_tokens),
                token_bytes);
            !st || std::memcmp(want, got, token_bytes) != 0) {
          std::printf("%s: loaded token %u differs on rank %u\n", r.id.c_str(), p, w->rank());
          return false;
        }
        checked_bytes_ += token_bytes;
      }
    }
    std::printf("%s: %u loaded tokens match byte for byte on %zu ranks\n", r.id.c_str(),
                r.load_to - r.load_from, workers_.size());
    return true;
  }

  embed::scheduler_connector& sc_;
  std::vector<std::unique_ptr<embed::worker_connector>>& workers_;
  std::vector<kvc::cuda::device_buffer>& kv_;
  std::vector<std::unique_ptr<request>> requests_;
  std::vector<request*> waiting_;
  std::vector<request*> running_;
  std::vector<gpu_block> free_;
  std::vector<std::string> finished_prev_;
  kvc::step_id step_ = 0;
  uint64_t checked_bytes_ = 0;
};

int fail_main(const char* what, const kvc::status& st) {
  std::printf("%s: %s\n", what, st.to_string().c_str());
  return 1;
}

int run() {
  // The scheduler side: hosts the scheduler + coordinator actors in this process. listen = false:
  // only this process's workers register (an engine with worker processes keeps it on and
  // gives them port()).
  embed::scheduler_connector_config sc_cfg;
  sc_cfg.listen = false;
  sc_cfg.token = "example-token";
  sc_cfg.topology.tp_size = tp_size;
  sc_cfg.pool.instance = "example" + std::to_string(::getpid());
  sc_cfg.pool.slots_per_rank = 16;
  sc_cfg.pool.slot_bytes = factor * page_bytes;
  sc_cfg.planner.gpu_block_size = block_tokens;
  sc_cfg.planner.offloaded_block_size = block_tokens * factor;
  sc_cfg.planner.hash_block_size = block_tokens;
  auto sc = embed::scheduler_connector::create(sc_cfg);
  if (!sc) return fail_main("scheduler_connector::create", sc.error());

  // The worker side: one connector per rank, each with its GPU KV cache registered.
  std::vector<std::unique_ptr<embed::worker_connector>> workers;
  std::vector<kvc::cuda::device_buffer> kv;
  for (kvc::rank_id r = 0; r < tp_size; ++r) {
    embed::worker_connector_config wc;
    wc.mode = embed::connection_mode::in_process;
    wc.token = sc_cfg.token;
    wc.topology = sc_cfg.topology;
    wc.pool = sc_cfg.pool;
    wc.rank = r;
    wc.backend = "sim";
    wc.block_size_factor = factor;
    auto w = embed::worker_connector::create(wc, sc->get());
    if (!w) return fail_main("worker_connector::create", w.error());
    auto buf = (*w)->copy_engine().allocate_device(num_gpu_blocks * page_bytes);
    if (!buf) return fail_main("allocate_device", buf.error());
    // One layer: (num_blocks, block_size, token_bytes) of 1-byte elements.
    const kvc::cuda::kv_tensor_desc desc{reinterpret_cast<uintptr_t>(buf->data),
                                         {num_gpu_blocks, block_tokens, token_bytes},
                                         {static_cast<int64_t>(page_bytes), token_bytes, 1},
                                         1,
                                         /*block_dim=*/0};
    if (auto st = (*w)->register_kv_caches({&desc, 1}); !st) {
      return fail_main("register_kv_caches", st);
    }
    kv.push_back(*buf);
    workers.push_back(std::move(w).value());
  }
  if (auto st = (*sc)->wait_for_workers(5s); !st) return fail_main("wait_for_workers", st);
  std::printf("%u workers registered; pool %s\n", tp_size, (*sc)->segment_name().c_str());

  toy_engine engine{**sc, workers, kv};
  std::vector<uint32_t> prompt(16);
  for (uint32_t i = 0; i < 16; ++i) prompt[i] = 10 + i;
  engine.add("a", prompt, 1);
  // Steps go on until every request finished and its stores drained. A step that computes
  // nothing finishes the copies in flight, so this takes a few steps; 100 means it is broken.
  auto run_until_idle = [&engine] {
    for (int steps = 0; !engine.idle(); ++steps) {
      if (steps == 100 || !engine.step()) return false;
    }
    return true;
  };
  if (!run_until_idle()) return 1;
  std::vector<uint32_t> longer = prompt;
  for (uint32_t t : {90u, 91u, 92u, 93u}) longer.push_back(t);
  engine.add("b", longer, 2);
  engine.add("c", {7, 7, 7, 7, 7, 7, 7, 7, 7}, 2);
  if (!run_until_idle()) return 1;
  if (!engine.idle() || engine.checked_bytes() == 0) {
    std::printf("the requests did not all finish, or nothing was loaded\n");
    return 1;
  }
  const auto& st = (*sc)->stats();
  std::printf("example engine: ok (%llu store jobs, %llu load jobs, %llu loaded bytes checked)\n",
              static_cast<unsigned long long>(st.stores_ok),
              static_cast<unsigned long long>(st.loads_ok),
              static_cast<unsigned long long>(engine.checked_bytes()));
  // The scheduler side stops the workers (their connectors see it), then everything goes.
  auto stopped = (*sc)->shutdown(5s);
  workers.clear();
  return stopped ? 0 : fail_main("shutdown", stopped.error());
}

}  // namespace

int main() {
  return run();
}
