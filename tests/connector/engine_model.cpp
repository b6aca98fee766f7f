#include "tests/connector/engine_model.hpp"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "cuda/engine_factory.hpp"

namespace kvc::testing {

namespace {

uint32_t cdiv(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

block_key key_of_hash(uint64_t h) {
  return {h, block_key::mix(h ^ 0x5bd1e995u)};
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct engine_model::request {
  std::string id;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> th;       ///< th[p]: hash of tokens [0, p]
  std::vector<block_key> hashes;  ///< one per full GPU block
  uint32_t max_new = 0;
  uint32_t outputs = 0;
  bool do_remote_decode = false;

  std::vector<gpu_block> blocks;
  uint32_t num_computed = 0;
  request_state st = request_state::waiting;
  bool ever_scheduled = false;
  bool resumed = false;  ///< preempted since it was last scheduled
  // async load
  bool load_done = false;
  uint32_t load_local = 0;   ///< tokens from the GPU prefix cache
  uint32_t load_target = 0;  ///< local + external
  uint32_t load_valid = 0;   ///< tokens usable after the load (truncated by invalid blocks)
  // finished / aborted, blocks held
  bool hold_sending = false;
  bool hold_load = false;

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
};

struct engine_model::sched_entry {
  request* q = nullptr;
  uint32_t num_computed = 0;  ///< before this step
  uint32_t num_new = 0;
  std::vector<gpu_block> block_ids;  ///< all blocks (new / resumed) or the new ones (running)
  bool is_new = false;
  bool resumed = false;
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

uint64_t engine_model::chain(uint64_t prev, uint32_t token) noexcept {
  return block_key::mix(prev * 0x100000001b3ULL ^ (uint64_t{token} + 0x9e3779b97f4a7c15ULL));
}

void engine_model::token_kv(uint64_t h, uint32_t layer, uint32_t kv, rank_id rank, std::byte* out,
                            size_t bytes) {
  const uint64_t seed = block_key::mix(h ^ block_key::mix(uint64_t{layer} * 2 + kv + 1) ^
                                       block_key::mix((uint64_t{rank} << 32) | 0xabcU));
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = block_key::mix(seed + i);
    std::memcpy(out + i, &v, std::min<size_t>(8, bytes - i));
  }
}

engine_model::engine_model(engine_config cfg)
    : cfg_(std::move(cfg)), pool_(std::max<uint32_t>(cfg_.num_gpu_blocks, 2)) {}

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

  scheduler::connector_config sc;
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
  auto s = scheduler::planner::create(sc, std::move(rec));
  if (!s) return s.error();
  sched_ = std::move(s).value();
  agg_ = std::make_unique<rank_aggregator>(cfg_.world_size);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Requests

void engine_model::append_token(request& q, uint32_t token) {
  q.th.push_back(chain(q.th.empty() ? 0 : q.th.back(), token));
  q.tokens.push_back(token);
  if (q.tokens.size() % cfg_.gpu_block_size == 0) q.hashes.push_back(key_of_hash(q.th.back()));
}

void engine_model::add_request(request_spec spec) {
  auto q = std::make_unique<request>();
  q->id = spec.id;
  q->max_new = spec.max_new_tokens;
  q->do_remote_decode = spec.do_remote_decode;
  for (uint32_t t : spec.prompt) append_token(*q, t);
  waiting_.push_back(q.get());
  requests_[spec.id] = std::move(q);
}

std::vector<block_key> engine_model::keys_of(const std::vector<uint32_t>& tokens) const {
  std::vector<block_key> keys;
  const size_t obs = size_t{cfg_.gpu_block_size} * cfg_.block_size_factor;
  uint64_t h = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    h = chain(h, tokens[p]);
    if ((p + 1) % obs == 0) keys.push_back(key_of_hash(h));
  }
  return keys;
}

scheduler::request_view engine_model::view(const request& q) const {
  return {q.id, q.hashes, q.num_tokens(), q.do_remote_decode};
}

void engine_model::release(request& q) {
  pool_.free(q.blocks);
  q.blocks.clear();
  q.st = request_state::done;
}

void engine_model::preempt(request& q, step_report& rep) {
  pool_.free(q.blocks);
  q.blocks.clear();
  q.num_computed = 0;
  q.st = request_state::waiting;
  q.resumed = true;
  waiting_.push_front(&q);
  rep.preempted.push_back(q.id);
  ++stats_.preemptions;
}

void engine_model::finish(request& q) {
  std::erase(running_, &q);
  q.st = request_state::finished_holding;
  q.hold_sending = sched_->request_finished(q.id);
  finished_now_.push_back(q.id);
  if (!q.hold_sending && !q.hold_load) release(q);
}

void engine_model::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  request& q = *it->second;
  switch (q.st) {
    case request_state::running:
      finish(q);
      return;
    case request_state::waiting_for_remote_kvs:
      q.hold_load = !q.load_done;
      [[fallthrough]];
    case request_state::waiting:
      std::erase(waiting_, &q);
      q.st = request_state::finished_holding;
      q.hold_sending = sched_->request_finished(q.id);
      finished_now_.push_back(q.id);
      if (!q.hold_sending && !q.hold_load) release(q);
      return;
    case request_state::finished_holding:
    case request_state::done:
      return;
  }
}

void engine_model::cache_full_blocks(request& q) {
  if (!cfg_.enable_prefix_caching) return;
  const uint32_t full = q.num_computed / cfg_.gpu_block_size;
  for (uint32_t i = 0; i < full && i < q.blocks.size(); ++i) pool_.cache(q.blocks[i], q.hashes[i]);
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

void engine_model::forward(const std::vector<sched_entry>& sched, step_report& rep) {
  std::vector<std::byte> buf(token_bytes());
  for (const auto& e : sched) {
    const request& q = *e.q;
    for (uint32_t p = e.num_computed; p < e.num_computed + e.num_new; ++p) {
      const gpu_block b = q.blocks[p / cfg_.gpu_block_size];
      const uint32_t slot = p % cfg_.gpu_block_size;
      for (rank_id r = 0; r < cfg_.world_size; ++r) {
        for (uint32_t l = 0; l < cfg_.num_layers; ++l) {
          for (uint32_t kv = 0; kv < 2; ++kv) {
            token_kv(q.th[p], l, kv, r, buf.data(), buf.size());
            if (auto st = engines_[r]->upload(token_ptr(r, l, kv, b, slot), buf.data(), buf.size());
                !st.ok()) {
              rep.errors.push_back("forward upload: " + st.to_string());
              return;
            }
          }
        }
      }
    }
    stats_.tokens_computed += e.num_new;
  }
}

step_report engine_model::step() {
  step_report rep;
  rep.step = ++step_;
  const uint32_t bs = cfg_.gpu_block_size;
  std::vector<sched_entry> sched;

  // 1a. Running requests: one decode token each; preempt from the back when blocks run out.
  for (size_t i = 0; i < running_.size();) {
    request& q = *running_[i];
    const uint32_t num_new = q.num_tokens() - q.num_computed;
    const uint32_t need = cdiv(q.num_tokens(), bs) - static_cast<uint32_t>(q.blocks.size());
    std::vector<gpu_block> got;
    bool self_preempted = false;
    while (need > 0) {
      if (auto b = pool_.allocate(need)) {
        got = std::move(*b);
        break;
      }
      request* victim = running_.back();
      running_.pop_back();
      preempt(*victim, rep);
      if (victim == &q) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    q.blocks.insert(q.blocks.end(), got.begin(), got.end());
    sched.push_back({&q, q.num_computed, num_new, std::move(got), false, false});
    ++i;
  }

  // 1b. Waiting requests, unless somebody was preempted in this step. New requests start in
  // order: once one cannot get its blocks, no later one starts. Requests whose load is done
  // are promoted whenever their remaining blocks are free, whatever waits ahead of them: they
  // hold blocks that only running can give back (stopping at the first blocked request
  // deadlocked when those requests held the blocks the one ahead needed).
  if (rep.preempted.empty()) {
    bool new_blocked = false;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      request& q = **it;
      if (q.st == request_state::waiting_for_remote_kvs) {
        if (!q.load_done) {
          ++it;
          continue;
        }
        // Promote: the loaded prefix counts as computed (the last token is always recomputed).
        uint32_t computed = std::min(q.load_valid, q.num_tokens());
        if (computed == q.num_tokens()) --computed;
        const uint32_t need = cdiv(q.num_tokens(), bs) - static_cast<uint32_t>(q.blocks.size());
        auto got = pool_.allocate(need);
        if (!got) {  // it keeps its loaded blocks and waits
          ++it;
          continue;
        }
        q.blocks.insert(q.blocks.end(), got->begin(), got->end());
        stats_.tokens_loaded += q.load_valid - q.load_local;
        stats_.tokens_invalidated += q.load_target - q.load_valid;
        q.num_computed = computed;
        q.load_done = false;
        cache_full_blocks(q);
      } else {
        if (new_blocked) {
          ++it;
          continue;
        }
        std::vector<gpu_block> hits;
        if (cfg_.enable_prefix_caching) {
          hits = pool_.cached_prefix(q.hashes, (q.num_tokens() - 1) / bs);
        }
        const uint32_t local = static_cast<uint32_t>(hits.size()) * bs;
        const auto m = sched_->get_num_new_matched_tokens(view(q), local);
        if (!m.tokens) {
          ++it;
          continue;
        }
        const uint32_t ext = *m.tokens;
        const bool async = m.is_async && ext > 0;
        const uint32_t total = async ? local + ext : q.num_tokens();
        pool_.take(hits);
        auto got = pool_.allocate(cdiv(total, bs) - static_cast<uint32_t>(hits.size()));
        if (!got) {
          pool_.free(hits);
          new_blocked = true;
          ++it;
          continue;
        }
        q.blocks = hits;
        q.blocks.insert(q.blocks.end(), got->begin(), got->end());
        if (auto st = sched_->update_state_after_alloc(view(q), q.blocks, async ? ext : 0);
            !st.ok()) {
          rep.errors.push_back("update_state_after_alloc(" + q.id + "): " + st.to_string());
        }
        q.num_computed = local;
        if (async) {
          q.st = request_state::waiting_for_remote_kvs;
          q.load_local = local;
          q.load_target = local + ext;
          ++it;
          continue;
        }
      }
      q.st = request_state::running;
      it = waiting_.erase(it);
      running_.push_back(&q);
      sched.push_back({&q, q.num_computed, q.num_tokens() - q.num_computed, q.blocks,
                       !q.ever_scheduled, q.resumed && q.ever_scheduled});
    }
  }

  // 2. Connector metadata.
  std::vector<scheduler::scheduled_request> new_reqs;
  std::vector<scheduler::scheduled_request> cached_reqs;
  for (auto& e : sched) {
    scheduler::scheduled_request sr{view(*e.q), e.block_ids, e.num_computed, e.num_new, e.resumed};
    (e.is_new ? new_reqs : cached_reqs).push_back(sr);
    e.q->ever_scheduled = true;
    e.q->resumed = false;
    rep.scheduled.push_back(e.q->id);
  }
  std::vector<std::string_view> preempted(rep.preempted.begin(), rep.preempted.end());
  auto meta = sched_->build_connector_meta({rep.step, new_reqs, cached_reqs, preempted});
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
  forward(sched, rep);
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
  if (auto st = sched_->update_connector_output(rep.output); !st.ok()) {
    rep.errors.push_back("update_connector_output: " + st.to_string());
  }
  rep.completions = sched_->take_request_completions();

  // 4. Model outputs: computed tokens, the next token, finished requests.
  for (auto& e : sched) {
    request& q = *e.q;
    q.num_computed += e.num_new;
    cache_full_blocks(q);
    if (q.num_computed == q.num_tokens()) {
      append_token(q, 100000 + static_cast<uint32_t>(block_key::mix(q.th.back()) % 50000));
      if (++q.outputs >= q.max_new) finish(q);
    }
  }
  apply_completions(rep.completions, rep);

  rep.finished = finished_now_;
  finished_prev_ = std::move(finished_now_);
  finished_now_.clear();
  if (cfg_.verify_each_step) {
    for (auto& line : verify()) rep.errors.push_back("verify: " + line);
  }
  return rep;
}

void engine_model::apply_completions(const scheduler::request_completions& c, step_report& rep) {
  const std::unordered_set<gpu_block> invalid(c.invalid_block_ids.begin(),
                                              c.invalid_block_ids.end());
  for (const auto& id : c.finished_recving) {
    auto it = requests_.find(id);
    if (it == requests_.end()) {
      rep.errors.push_back("finished_recving for unknown request " + id);
      continue;
    }
    request& q = *it->second;
    if (q.st == request_state::finished_holding) {  // aborted while loading
      q.hold_load = false;
      if (!q.hold_sending) release(q);
      continue;
    }
    if (q.st != request_state::waiting_for_remote_kvs) {
      rep.errors.push_back("finished_recving for request " + id + " that is not loading");
      continue;
    }
    q.load_done = true;
    q.load_valid = q.load_target;
    for (size_t i = 0; i < q.blocks.size(); ++i) {
      if (invalid.contains(q.blocks[i])) {
        q.load_valid =
            std::min<uint32_t>(q.load_valid, static_cast<uint32_t>(i) * cfg_.gpu_block_size);
        break;
      }
    }
  }
  for (const auto& id : c.finished_sending) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->st != request_state::finished_holding) {
      rep.errors.push_back("finished_sending for request " + id + " that is not held");
      continue;
    }
    it->second->hold_sending = false;
    if (!it->second->hold_load) release(*it->second);
  }
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
  for (const auto& [id, q] : requests_) {
    if (q->st != request_state::done) return false;
  }
  if (sched_->jobs_in_flight() > 0 || agg_->pending() > 0) return false;
  for (const auto& w : workers_) {
    if (w.queued_stores() > 0 || w.transfers_in_flight() > 0 || w.jobs_known() > 0) return false;
  }
  return finished_prev_.empty();
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
    h = chain(h, tokens[p]);
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
  for (const request* q : running_) {
    for (auto& line : verify_tokens(q->tokens, q->num_computed, q->blocks)) {
      out.push_back(q->id + ": " + line);
    }
  }
  return out;
}

std::optional<request_state> engine_model::state_of(const std::string& id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  return it->second->st;
}

std::vector<uint32_t> engine_model::tokens_of(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? std::vector<uint32_t>{} : it->second->tokens;
}

std::vector<gpu_block> engine_model::blocks_of(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? std::vector<gpu_block>{} : it->second->blocks;
}

uint32_t engine_model::num_computed(const std::string& id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second->num_computed;
}

}  // namespace kvc::testing
