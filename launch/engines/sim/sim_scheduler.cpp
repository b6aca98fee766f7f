#include "launch/engines/sim/sim_scheduler.hpp"

#include <algorithm>
#include <unordered_set>

#include "launch/engines/sim/kv_content.hpp"

namespace kvc::sim {

namespace {

uint32_t cdiv(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}

using state = request_phase;

}  // namespace

struct sim_scheduler::request {
  std::string id;
  uint64_t conversation = 0;
  uint32_t turn = 0;
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> th;       ///< th[p]: chained hash of tokens [0, p]
  std::vector<block_key> hashes;  ///< one per full GPU block
  uint32_t max_new = 0;
  uint32_t outputs = 0;
  double arrival_us = 0;
  double first_token_us = 0;
  uint64_t prefill_tokens = 0;  ///< computed as prefill, recomputations included
  bool do_remote_decode = false;

  std::vector<gpu_block> blocks;
  uint32_t num_computed = 0;
  state st = state::waiting;
  bool ever_scheduled = false;
  bool resumed = false;  ///< preempted since it was last scheduled
  bool load_done = false;
  uint32_t load_local = 0;   ///< tokens from the GPU prefix cache
  uint32_t load_target = 0;  ///< local + external
  uint32_t load_valid = 0;   ///< usable after the load (cut at the first invalid block)
  bool hold_sending = false;
  bool hold_load = false;
  bool gpu_lost = false;  ///< a GPU cache reset came while it was loading: recompute all

  uint32_t num_tokens() const { return static_cast<uint32_t>(tokens.size()); }
};

struct sim_scheduler::entry {
  request* q = nullptr;
  uint32_t num_computed = 0;  ///< before this step
  uint32_t num_new = 0;
  std::vector<gpu_block> block_ids;  ///< all blocks (new / resumed) or the new ones (running)
  bool is_new = false;
  bool resumed = false;
};

sim_scheduler::sim_scheduler(const engine_limits& limits, connector_calls& connector)
    : limits_(limits), connector_(connector), pool_(std::max<uint32_t>(limits.gpu_blocks, 2)) {}

sim_scheduler::~sim_scheduler() = default;

scheduler::request_view sim_scheduler::view(const request& q) const {
  return {q.id, q.hashes, q.num_tokens(), q.do_remote_decode};
}

request_info sim_scheduler::info(const request& q) {
  return {q.id, q.st, q.tokens, q.blocks, q.num_computed};
}

std::optional<request_info> sim_scheduler::find(std::string_view id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  return info(*it->second);
}

std::vector<request_info> sim_scheduler::running_requests() const {
  std::vector<request_info> out;
  out.reserve(running_.size());
  for (const request* q : running_) out.push_back(info(*q));
  return out;
}

void sim_scheduler::append_token(request& q, uint32_t token) {
  q.th.push_back(chain(q.th.empty() ? 0 : q.th.back(), token));
  q.tokens.push_back(token);
  if (q.tokens.size() % limits_.gpu_block_size == 0) q.hashes.push_back(block_hash_of(q.th.back()));
}

status sim_scheduler::add(request_spec spec) {
  if (spec.prompt.empty() || spec.max_new_tokens == 0) {
    return make_error(errc::invalid_argument, "request " + spec.id + ": empty prompt or output");
  }
  const uint64_t most = uint64_t{limits_.gpu_blocks - 1} * limits_.gpu_block_size;
  if (spec.prompt.size() + spec.max_new_tokens > most) {
    return make_error(errc::invalid_argument,
                      "request " + spec.id + ": " + std::to_string(spec.prompt.size()) + " + " +
                          std::to_string(spec.max_new_tokens) + " tokens never fit " +
                          std::to_string(most) + " tokens of GPU blocks");
  }
  if (requests_.contains(spec.id)) {
    return make_error(errc::invalid_argument, "request " + spec.id + " exists");
  }
  auto q = std::make_unique<request>();
  q->id = spec.id;
  q->conversation = spec.conversation;
  q->turn = spec.turn;
  q->max_new = spec.max_new_tokens;
  q->do_remote_decode = spec.do_remote_decode;
  q->arrival_us = stats_.clock_us;
  q->tokens.reserve(spec.prompt.size() + spec.max_new_tokens);
  for (uint32_t t : spec.prompt) append_token(*q, t);
  waiting_.push_back(q.get());
  requests_.emplace(q->id, std::move(q));
  ++stats_.requests_arrived;
  return status::success();
}

// ---------------------------------------------------------------------------------------------
// Request life cycle

void sim_scheduler::release(request& q) {
  pool_.free(q.blocks);
  q.blocks.clear();
  released_.push_back(q.id);
}

void sim_scheduler::preempt(request& q) {
  pool_.free(q.blocks);
  q.blocks.clear();
  q.num_computed = 0;
  q.st = state::waiting;
  q.resumed = true;
  waiting_.push_front(&q);
  preempted_.push_back(q.id);
  ++stats_.preemptions;
}

void sim_scheduler::finish(request& q) {
  std::erase(running_, &q);
  q.st = state::finished_holding;
  q.hold_sending = connector_.request_finished(q.id);
  if (!q.hold_sending && !q.hold_load) release(q);
}

void sim_scheduler::abort(request& q) {
  switch (q.st) {
    case state::running:
      finish(q);
      break;
    case state::loading:
      q.hold_load = !q.load_done;
      [[fallthrough]];
    case state::waiting:
      std::erase(waiting_, &q);
      q.st = state::finished_holding;
      q.hold_sending = connector_.request_finished(q.id);
      if (!q.hold_sending && !q.hold_load) release(q);
      break;
    case state::finished_holding:
      return;
  }
  ++stats_.requests_aborted;
}

void sim_scheduler::erase_released() {
  for (const auto& id : released_) requests_.erase(id);
  released_.clear();
}

void sim_scheduler::abort_all() {
  std::vector<request*> all;
  for (auto& [id, q] : requests_) all.push_back(q.get());
  for (request* q : all) abort(*q);
  erase_released();
}

status sim_scheduler::abort(std::string_view id) {
  if (in_step_) {
    return make_error(errc::precondition_failed,
                      "abort: step " + std::to_string(step_) + " is scheduled");
  }
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return make_error(errc::not_found, "abort: no request " + std::string(id));
  }
  abort(*it->second);
  erase_released();
  return status::success();
}

status sim_scheduler::lose_gpu_cache() {
  if (in_step_) {
    return make_error(errc::precondition_failed,
                      "lose_gpu_cache: step " + std::to_string(step_) + " is scheduled");
  }
  // The last running request first, as memory pressure preempts: the waiting queue keeps
  // their order at its front.
  while (!running_.empty()) {
    request* q = running_.back();
    running_.pop_back();
    if (q->num_computed > 0) ++stats_.requests_recomputed;
    preempt(*q);
  }
  for (auto& [id, q] : requests_) {
    if (q->st != state::loading) continue;
    // Loaded, not promoted yet: what it got is gone on the restarted rank. Still loading: the
    // same once finished_recving comes. The promotion counts it as recomputed.
    if (q->load_done) {
      q->load_valid = 0;
    } else {
      q->gpu_lost = true;
    }
  }
  pool_.reset_prefix_cache();
  ++stats_.gpu_cache_resets;
  return status::success();
}

void sim_scheduler::cache_full_blocks(request& q) {
  if (!limits_.enable_prefix_caching) return;
  const uint32_t full = q.num_computed / limits_.gpu_block_size;
  for (uint32_t i = 0; i < full && i < q.blocks.size(); ++i) pool_.cache(q.blocks[i], q.hashes[i]);
}

/// Blocks for the request's first `tokens` tokens (it may hold more already); false, nothing
/// changed, when too few are free.
bool sim_scheduler::allocate(request& q, uint32_t tokens) {
  const uint32_t want = cdiv(tokens, limits_.gpu_block_size);
  if (want <= q.blocks.size()) return true;
  auto got = pool_.allocate(want - static_cast<uint32_t>(q.blocks.size()));
  if (!got) return false;
  q.blocks.insert(q.blocks.end(), got->begin(), got->end());
  return true;
}

// ---------------------------------------------------------------------------------------------
// One step

void sim_scheduler::schedule_running() {
  for (size_t i = 0; i < running_.size();) {
    request& q = *running_[i];
    const uint32_t num_new = std::min(q.num_tokens() - q.num_computed, budget_);
    if (num_new == 0) {  // the budget is spent: it waits for the next step, keeping its blocks
      ++i;
      continue;
    }
    const size_t before = q.blocks.size();
    bool self_preempted = false;
    while (!allocate(q, q.num_computed + num_new)) {
      request* victim = running_.back();
      running_.pop_back();
      preempt(*victim);
      if (victim == &q) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    budget_ -= num_new;
    entries_.push_back({&q, q.num_computed, num_new,
                        std::vector<gpu_block>(q.blocks.begin() + before, q.blocks.end()), false,
                        false});
    ++i;
  }
}

void sim_scheduler::schedule_waiting() {
  const uint32_t bs = limits_.gpu_block_size;
  bool new_blocked = false;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (budget_ == 0 || running_.size() >= limits_.max_running) return;
    request& q = **it;
    if (q.st == state::loading) {
      if (!q.load_done) {
        ++it;
        continue;
      }
      // Promote: the loaded prefix counts as computed (the last token is always recomputed).
      uint32_t computed = std::min(q.load_valid, q.num_tokens());
      if (computed == q.num_tokens()) --computed;
      const uint32_t num_new = std::min(q.num_tokens() - computed, budget_);
      if (!allocate(q, computed + num_new)) {  // it keeps its loaded blocks and waits
        ++it;
        continue;
      }
      stats_.cpu_hit_tokens += q.load_valid - std::min(q.load_valid, q.load_local);
      stats_.cpu_hit_tokens_invalid += q.load_target - q.load_valid;
      if (q.load_valid < q.load_target) ++stats_.requests_recomputed;
      q.num_computed = computed;
      q.load_done = false;
      cache_full_blocks(q);
    } else {
      if (new_blocked) {
        ++it;
        continue;
      }
      const std::vector<gpu_block> hits =
          limits_.enable_prefix_caching ? pool_.cached_prefix(q.hashes, (q.num_tokens() - 1) / bs)
                                        : std::vector<gpu_block>{};
      const uint32_t local = static_cast<uint32_t>(hits.size()) * bs;
      const auto m = connector_.get_num_new_matched_tokens(view(q), local);
      if (!m.tokens) {  // its hit blocks are being loaded for another request: next step
        ++it;
        continue;
      }
      const uint32_t ext = *m.tokens;
      const bool async = m.is_async && ext > 0;
      const uint32_t target =
          async ? local + ext : local + std::min(q.num_tokens() - local, budget_);
      pool_.take(hits);
      q.blocks = hits;
      if (!allocate(q, target)) {
        pool_.free(hits);
        q.blocks.clear();
        new_blocked = true;
        ++it;
        continue;
      }
      if (auto st = connector_.update_state_after_alloc(view(q), q.blocks, async ? ext : 0); !st) {
        errors_.push_back("update_state_after_alloc(" + q.id + "): " + st.to_string());
      }
      q.num_computed = local;
      stats_.gpu_hit_tokens += local;
      if (async) {
        q.st = state::loading;
        q.load_local = local;
        q.load_target = local + ext;
        step_loaded_ += ext;
        load_check check{q.id, {}, {}};
        for (uint32_t b = local / bs; b < (local + ext) / bs; ++b)
          check.blocks.push_back(q.blocks[b]);
        check.hashes.assign(q.th.begin() + local, q.th.begin() + local + ext);
        model_.loads.push_back(std::move(check));
        ++it;
        continue;
      }
    }
    const uint32_t num_new = std::min(q.num_tokens() - q.num_computed, budget_);
    budget_ -= num_new;
    q.st = state::running;
    it = waiting_.erase(it);
    running_.push_back(&q);
    entries_.push_back(
        {&q, q.num_computed, num_new, q.blocks, !q.ever_scheduled, q.resumed && q.ever_scheduled});
  }
}

void sim_scheduler::make_step_input() {
  new_requests_.clear();
  cached_requests_.clear();
  const uint32_t bs = limits_.gpu_block_size;
  for (auto& e : entries_) {
    request& q = *e.q;
    const scheduler::scheduled_request sr{view(q), e.block_ids, e.num_computed, e.num_new,
                                          e.resumed};
    (e.is_new ? new_requests_ : cached_requests_).push_back(sr);
    q.ever_scheduled = true;
    q.resumed = false;
    for (uint32_t p = e.num_computed; p < e.num_computed + e.num_new; ++p) {
      model_.writes.push_back({q.blocks[p / bs], p % bs, q.th[p]});
    }
    const bool decode = q.outputs > 0 && e.num_new == 1 && e.num_computed + 1 == q.num_tokens();
    if (decode) {
      step_decodes_ = true;
      ++stats_.decode_tokens;
    } else {
      step_prefill_ += e.num_new;
      q.prefill_tokens += e.num_new;
      stats_.prefill_tokens_computed += e.num_new;
    }
  }
  preempted_views_.assign(preempted_.begin(), preempted_.end());
  input_ = {step_, new_requests_, cached_requests_, preempted_views_};
}

void sim_scheduler::schedule() {
  entries_.clear();
  in_step_ = true;
  model_ = {};
  model_.step = ++step_;
  budget_ = limits_.max_batched_tokens;
  step_prefill_ = 0;
  step_loaded_ = 0;
  step_decodes_ = false;
  // Preemptions of a GPU cache reset since the last step are reported with this one; only
  // this step's memory pressure keeps the waiting requests waiting.
  const size_t reset_preempted = preempted_.size();
  schedule_running();
  if (preempted_.size() == reset_preempted) schedule_waiting();
  make_step_input();
}

std::vector<finished_turn> sim_scheduler::complete(const scheduler::request_completions& c) {
  stats_.clock_us += static_cast<double>(step_prefill_) * limits_.prefill_token_us +
                     (step_decodes_ ? limits_.decode_step_us : 0.0) +
                     static_cast<double>(step_loaded_) * limits_.load_token_us;
  std::vector<finished_turn> out;
  for (auto& e : entries_) {
    request& q = *e.q;
    q.num_computed += e.num_new;
    cache_full_blocks(q);
    if (q.num_computed < q.num_tokens()) continue;  // a prefill chunk
    // The sampled token: a pure function of the tokens so far.
    append_token(q, static_cast<uint32_t>(block_key::mix(q.th.back()) % vocabulary));
    if (q.outputs++ == 0) q.first_token_us = stats_.clock_us;
    if (q.outputs >= q.max_new) {
      ++stats_.requests_finished;
      stats_.output_tokens += q.outputs;
      stats_.finished.push_back(
          {q.id, q.arrival_us, q.first_token_us, stats_.clock_us, q.outputs, q.prefill_tokens});
      out.push_back({q.conversation, q.turn, q.tokens});
      finish(q);
    }
  }
  apply(c);
  entries_.clear();
  preempted_.clear();
  in_step_ = false;
  erase_released();
  return out;
}

void sim_scheduler::apply(const scheduler::request_completions& c) {
  const std::unordered_set<gpu_block> invalid(c.invalid_block_ids.begin(),
                                              c.invalid_block_ids.end());
  for (const auto& id : c.finished_recving) {
    auto it = requests_.find(id);
    if (it == requests_.end()) {
      errors_.push_back("finished_recving for unknown request " + id);
      continue;
    }
    request& q = *it->second;
    if (q.st == state::finished_holding) {  // aborted while loading
      q.hold_load = false;
      if (!q.hold_sending) release(q);
      continue;
    }
    if (q.st != state::loading) {
      errors_.push_back("finished_recving for request " + id + " that is not loading");
      continue;
    }
    q.load_done = true;
    q.load_valid = q.gpu_lost ? 0 : q.load_target;
    q.gpu_lost = false;
    for (size_t i = 0; i < q.blocks.size(); ++i) {
      if (invalid.contains(q.blocks[i])) {
        q.load_valid =
            std::min<uint32_t>(q.load_valid, static_cast<uint32_t>(i) * limits_.gpu_block_size);
        break;
      }
    }
  }
  for (const auto& id : c.finished_sending) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->st != state::finished_holding ||
        !it->second->hold_sending) {
      errors_.push_back("finished_sending for request " + id + " that is not held");
      continue;
    }
    it->second->hold_sending = false;
    if (!it->second->hold_load) release(*it->second);
  }
}

}  // namespace kvc::sim
