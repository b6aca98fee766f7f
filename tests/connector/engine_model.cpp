#include "tests/connector/engine_model.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <unordered_map>

#include "cuda/engine_factory.hpp"
#include "launch/engines/sim/kv_content.hpp"

namespace kvc::testing {

// ---------------------------------------------------------------------------------------------

/// The planner behind sim_scheduler's connector calls; remembers the requests that finished.
class engine_model::planner_calls final : public sim::connector_calls {
 public:
  explicit planner_calls(scheduler::planner& p) : p_(p) {}
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed) override {
    return p_.get_num_new_matched_tokens(req, num_computed);
  }
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> blocks,
                                  uint32_t num_external) override {
    return p_.update_state_after_alloc(req, blocks, num_external);
  }
  bool request_finished(std::string_view id) override {
    finished.emplace_back(id);
    return p_.request_finished(id);
  }
  /// Finished (or aborted) since the caller last took them.
  std::vector<std::string> finished;

 private:
  scheduler::planner& p_;
};

/// Waits for every rank's report of a job: ok iff all ranks were ok (the first failure's errc),
/// bytes summed, seconds maxed. Waiting for all ranks also means no rank still writes a failed
/// load's blocks when the engine recomputes them.
class engine_model::rank_aggregator {
 public:
  explicit rank_aggregator(uint32_t world) : world_(world) {}

  void add(const job_result& r, std::vector<job_result>& out) {
    auto& p = partial_[r.job];
    if (p.count == 0) p.res = {r.job, r.kind, true, errc::ok, 0, 0.0};
    ++p.count;
    p.res.bytes += r.bytes;
    p.res.seconds = std::max(p.res.seconds, r.seconds);
    if (!r.ok && p.res.ok) {
      p.res.ok = false;
      p.res.error = r.error;
    }
    if (p.count == world_) {
      out.push_back(p.res);
      partial_.erase(r.job);
    }
  }
  size_t pending() const noexcept { return partial_.size(); }

 private:
  struct partial {
    uint32_t count = 0;
    job_result res;
  };
  uint32_t world_;
  std::unordered_map<job_id, partial> partial_;
};

// ---------------------------------------------------------------------------------------------

void engine_model::token_kv(uint64_t h, uint32_t layer, uint32_t kv, rank_id rank, std::byte* out,
                            size_t bytes) {
  sim::token_kv(h, 2 * layer + kv, rank, {out, bytes});  // K and V: two content layers
}

engine_model::engine_model(engine_config cfg) : cfg_(std::move(cfg)) {}

engine_model::~engine_model() = default;

result<std::unique_ptr<engine_model>> engine_model::create(engine_config cfg) {
  if (cfg.world_size == 0 || cfg.num_gpu_blocks < 2 || cfg.gpu_block_size == 0 ||
      cfg.block_size_factor == 0 || cfg.num_layers == 0 || cfg.head_dim == 0) {
    return make_error(errc::invalid_argument, "engine_model: bad geometry");
  }
  if (!cfg.pools.empty() && cfg.pools.size() != cfg.world_size) {
    return make_error(errc::invalid_argument, "engine_model: one pool region per rank needed");
  }
  std::unique_ptr<engine_model> m(new engine_model(std::move(cfg)));
  if (auto st = m->init(); !st.ok()) return st;
  return m;
}

status engine_model::init() {
  const uint32_t bs = cfg_.gpu_block_size;
  const uint64_t tb = token_bytes();
  const uint64_t plane = uint64_t{cfg_.num_gpu_blocks} * bs * tb;  // one of K / V
  const uint64_t slot_bytes = uint64_t{cfg_.block_size_factor} * cfg_.num_layers * 2 * bs * tb;
  if (cfg_.pools.empty()) {
    const uint64_t stride = (slot_bytes + 255) / 256 * 256;
    heap_pools_.reserve(cfg_.world_size);
    for (rank_id r = 0; r < cfg_.world_size; ++r) {
      heap_pools_.emplace_back(stride * cfg_.cpu_slots);
      cfg_.pools.push_back({heap_pools_.back().data(), stride, cfg_.cpu_slots});
    }
  }
  for (rank_id r = 0; r < cfg_.world_size; ++r) {
    std::unique_ptr<cuda::copy_engine> eng;
    if (cfg_.make_engine) {
      eng = cfg_.make_engine(r);
      if (!eng) return make_error(errc::invalid_argument, "engine_model: make_engine gave null");
    } else {
      auto e = cuda::make_copy_engine({"sim", 0});
      if (!e) return e.error();
      eng = std::move(e).value();
    }
    std::vector<cuda::device_buffer> layers;
    std::vector<cuda::kv_tensor_desc> descs;
    for (uint32_t l = 0; l < cfg_.num_layers; ++l) {
      auto buf = eng->allocate_device(2 * plane);
      if (!buf) return buf.error();
      layers.push_back(*buf);
      const int64_t hd = cfg_.head_dim;
      descs.push_back({reinterpret_cast<uintptr_t>(buf->data),
                       {2, cfg_.num_gpu_blocks, bs, 1, hd},
                       {static_cast<int64_t>(plane), static_cast<int64_t>(bs * tb),
                        static_cast<int64_t>(tb), static_cast<int64_t>(tb), 2},
                       2,
                       /*block_dim=*/1});
    }
    auto w = worker::transfer_executor::create({r, cfg_.block_size_factor, cfg_.pools[r]}, *eng);
    if (!w) return w.error();
    if (auto st = w->register_kv_caches(descs); !st.ok()) return st;
    workers_.push_back(std::move(w).value());
    kv_.push_back(std::move(layers));
    engines_.push_back(std::move(eng));
  }

  sim::engine_limits limits;
  limits.gpu_blocks = cfg_.num_gpu_blocks;
  limits.gpu_block_size = bs;
  limits.max_running = UINT32_MAX;        // no running limit
  limits.max_batched_tokens = UINT32_MAX;  // no token budget: a prefill runs whole
  limits.enable_prefix_caching = cfg_.enable_prefix_caching;

  scheduler::planner_config sc;
  sc.gpu_block_size = bs;
  sc.offloaded_block_size = bs * cfg_.block_size_factor;
  sc.hash_block_size = bs;
  sc.enable_prefix_caching = cfg_.enable_prefix_caching;
  sc.manager.capacity = cfg_.cpu_slots;
  sc.manager.policy = cfg_.policy;
  auto mgr = scheduler::offload_manager::create(sc.manager);
  if (!mgr) return mgr.error();
  auto rec = std::make_unique<recording_manager>(std::move(mgr).value());
  manager_ = rec.get();
  auto p = scheduler::planner::create(sc, std::move(rec));
  if (!p) return p.error();
  planner_ = std::move(p).value();
  calls_ = std::make_unique<planner_calls>(*planner_);
  sched_ = std::make_unique<sim::sim_scheduler>(limits, *calls_);
  agg_ = std::make_unique<rank_aggregator>(cfg_.world_size);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Requests

void engine_model::add_request(request_spec spec) {
  sim::request_spec r;
  r.id = spec.id;
  r.prompt = std::move(spec.prompt);
  r.max_new_tokens = spec.max_new_tokens;
  r.do_remote_decode = spec.do_remote_decode;
  if (auto st = sched_->add(std::move(r)); !st) {
    add_errors_.push_back("add_request: " + st.to_string());
    return;
  }
  added_.insert(spec.id);
}

void engine_model::abort(const std::string& id) {
  if (!sched_->find(id)) return;  // done already, or never added
  if (auto st = sched_->abort(id); !st) add_errors_.push_back("abort: " + st.to_string());
}

std::vector<block_key> engine_model::keys_of(const std::vector<uint32_t>& tokens) const {
  std::vector<block_key> keys;
  const size_t obs = size_t{cfg_.gpu_block_size} * cfg_.block_size_factor;
  uint64_t h = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    h = sim::chain(h, tokens[p]);
    if ((p + 1) % obs == 0) keys.push_back(sim::block_hash_of(h));
  }
  return keys;
}

// ---------------------------------------------------------------------------------------------
// One step

std::byte* engine_model::token_ptr(rank_id r, uint32_t layer, uint32_t kv, gpu_block b,
                                   uint32_t slot) const {
  const uint64_t tb = 2 * uint64_t{cfg_.head_dim};
  const uint64_t plane = uint64_t{cfg_.num_gpu_blocks} * cfg_.gpu_block_size * tb;
  return static_cast<std::byte*>(kv_[r][layer].data) + kv * plane +
         (uint64_t{b} * cfg_.gpu_block_size + slot) * tb;
}

void engine_model::forward(const sim::model_input& in, step_report& rep) {
  std::vector<std::byte> buf(token_bytes());
  for (const sim::token_write& w : in.writes) {
    for (rank_id r = 0; r < cfg_.world_size; ++r) {
      for (uint32_t l = 0; l < cfg_.num_layers; ++l) {
        for (uint32_t kv = 0; kv < 2; ++kv) {
          token_kv(w.hash, l, kv, r, buf.data(), buf.size());
          if (auto st = engines_[r]->upload(token_ptr(r, l, kv, w.block, w.slot), buf.data(),
                                            buf.size());
              !st.ok()) {
            rep.errors.push_back("forward upload: " + st.to_string());
            return;
          }
        }
      }
    }
  }
  stats_.tokens_computed += in.writes.size();
}

step_report engine_model::step() {
  step_report rep;
  rep.errors = std::exchange(add_errors_, {});
  const size_t scheduler_errors = sched_->errors().size();

  // 1. The scheduler.
  sched_->schedule();
  const scheduler::step_input& in = sched_->input();
  rep.step = in.step;
  for (const auto* list : {&in.new_requests, &in.cached_requests}) {
    for (const auto& r : *list) rep.scheduled.emplace_back(r.req.id);
  }
  rep.preempted.assign(in.preempted.begin(), in.preempted.end());

  // 2. Connector metadata.
  auto meta = planner_->build_connector_meta(in);
  if (!meta) {
    rep.errors.push_back("build_connector_meta: " + meta.error().to_string());
    meta = connector_metadata{};
    meta->step = rep.step;
  }
  rep.meta = *meta;

  // 3. Workers around the forward.
  auto check = [&rep](const char* what, rank_id r, const status& st) {
    if (!st.ok())
      rep.errors.push_back(std::string(what) + "[" + std::to_string(r) + "]: " + st.to_string());
  };
  for (auto& w : workers_) check("bind", w.rank(), w.bind_connector_metadata(rep.meta));
  if (before_workers_) before_workers_(rep.meta);
  for (auto& w : workers_) {
    check("handle_preemptions", w.rank(), w.handle_preemptions());
    check("start_load_kv", w.rank(), w.start_load_kv());
  }
  forward(sched_->model(), rep);
  for (auto& w : workers_) check("wait_for_save", w.rank(), w.wait_for_save());
  if (cfg_.wait_at_step_end) {
    for (auto& w : workers_) check("wait_in_flight", w.rank(), w.wait_in_flight());
  }
  rep.output.step = rep.step;
  for (auto& w : workers_) {
    rep.rank_outputs.push_back(w.get_finished(finished_prev_));
    rep.rank_load_errors.push_back(w.get_block_ids_with_load_errors());
    w.clear_connector_metadata();
    for (const auto& j : rep.rank_outputs.back().jobs) agg_->add(j, rep.output.jobs);
  }
  if (auto st = planner_->update_connector_output(rep.output); !st.ok()) {
    rep.errors.push_back("update_connector_output: " + st.to_string());
  }
  rep.completions = planner_->take_request_completions();

  // 4. Model outputs: computed tokens, the next token, finished requests, the completions.
  sched_->complete(rep.completions);
  const auto& errors = sched_->errors();
  rep.errors.insert(rep.errors.end(), errors.begin() + static_cast<ptrdiff_t>(scheduler_errors),
                    errors.end());
  const sim::engine_stats& st = sched_->stats();
  stats_.tokens_loaded = st.cpu_hit_tokens;
  stats_.tokens_invalidated = st.cpu_hit_tokens_invalid;
  stats_.preemptions = st.preemptions;

  rep.finished = std::exchange(calls_->finished, {});
  finished_prev_ = rep.finished;
  if (cfg_.verify_each_step) {
    for (auto& line : verify()) rep.errors.push_back("verify: " + line);
  }
  return rep;
}

std::vector<step_report> engine_model::run_until_idle(uint32_t max_steps) {
  std::vector<step_report> out;
  for (uint32_t i = 0; i < max_steps && !idle(); ++i) {
    out.push_back(step());
    auto& rep = out.back();
    if (!rep.errors.empty()) break;
    const bool progress = !rep.scheduled.empty() || !rep.output.jobs.empty() ||
                          !rep.completions.empty() || !rep.finished.empty();
    if (!progress) {
      // Nothing to do but wait for transfers: block on them instead of spinning, so the number
      // of steps does not depend on how fast the copy threads get a CPU.
      for (auto& w : workers_) {
        if (auto st = w.wait_in_flight(); !st.ok()) {
          rep.errors.push_back("wait_in_flight: " + st.to_string());
        }
      }
    }
  }
  return out;
}

bool engine_model::idle() const {
  if (!sched_->idle()) return false;
  if (planner_->jobs_in_flight() > 0 || agg_->pending() > 0) return false;
  for (const auto& w : workers_) {
    if (w.queued_stores() > 0 || w.transfers_in_flight() > 0 || w.jobs_known() > 0) return false;
  }
  return finished_prev_.empty() && calls_->finished.empty();
}

// ---------------------------------------------------------------------------------------------
// Verification and introspection

std::vector<std::string> engine_model::verify_tokens(const std::vector<uint32_t>& tokens,
                                                     uint32_t n,
                                                     const std::vector<gpu_block>& blocks) {
  std::vector<std::string> out;
  const uint32_t bs = cfg_.gpu_block_size;
  const size_t tb = token_bytes();
  std::vector<std::byte> want(tb);
  std::vector<std::byte> got(tb);
  uint64_t h = 0;
  for (uint32_t p = 0; p < n && p / bs < blocks.size(); ++p) {
    h = sim::chain(h, tokens[p]);
    const gpu_block b = blocks[p / bs];
    for (rank_id r = 0; r < cfg_.world_size; ++r) {
      for (uint32_t l = 0; l < cfg_.num_layers; ++l) {
        for (uint32_t kv = 0; kv < 2; ++kv) {
          token_kv(h, l, kv, r, want.data(), tb);
          if (auto st = engines_[r]->download(got.data(), token_ptr(r, l, kv, b, p % bs), tb);
              !st.ok()) {
            out.push_back("download failed: " + st.to_string());
            return out;
          }
          ++stats_.verified_tokens;
          if (got != want) {
            out.push_back("token " + std::to_string(p) + " (block " + std::to_string(b) +
                          ") layer " + std::to_string(l) + (kv == 0 ? " K" : " V") + " rank " +
                          std::to_string(r));
          }
        }
      }
    }
  }
  return out;
}

std::vector<std::string> engine_model::verify() {
  std::vector<std::string> out;
  for (const sim::request_info& q : sched_->running_requests()) {
    const std::vector<uint32_t> tokens(q.tokens.begin(), q.tokens.end());
    const std::vector<gpu_block> blocks(q.blocks.begin(), q.blocks.end());
    for (auto& line : verify_tokens(tokens, q.num_computed, blocks)) {
      out.push_back(std::string(q.id) + ": " + line);
    }
  }
  return out;
}

std::optional<request_state> engine_model::state_of(const std::string& id) const {
  const auto q = sched_->find(id);
  if (!q) return added_.contains(id) ? std::optional{request_state::done} : std::nullopt;
  switch (q->phase) {
    case sim::request_phase::waiting:
      return request_state::waiting;
    case sim::request_phase::loading:
      return request_state::waiting_for_remote_kvs;
    case sim::request_phase::running:
      return request_state::running;
    case sim::request_phase::finished_holding:
      return request_state::finished_holding;
  }
  return std::nullopt;
}

std::vector<uint32_t> engine_model::tokens_of(const std::string& id) const {
  const auto q = sched_->find(id);
  return q ? std::vector<uint32_t>(q->tokens.begin(), q->tokens.end()) : std::vector<uint32_t>{};
}

std::vector<gpu_block> engine_model::blocks_of(const std::string& id) const {
  const auto q = sched_->find(id);
  return q ? std::vector<gpu_block>(q->blocks.begin(), q->blocks.end()) : std::vector<gpu_block>{};
}

uint32_t engine_model::num_computed(const std::string& id) const {
  const auto q = sched_->find(id);
  return q ? q->num_computed : 0;
}

}  // namespace kvc::testing
