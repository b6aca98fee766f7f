#include "tests/connector/engine_model.hpp"

#include <chrono>
#include <climits>
#include <cstdint>
#include <iterator>
#include <span>
#include <string_view>
#include <utility>

#include "cuda/faulty_copy_engine.hpp"
#include "launch/engines/sim/kv_content.hpp"

namespace kvc::testing {

namespace {

using namespace std::chrono_literals;

/// How long a rank waits for its metadata and the scheduler for a step's output. On the memory
/// transport both are there before the wait starts; the limit only turns a bug into an error.
constexpr auto step_wait = 5s;

/// The shared secret of the harness's scheduler and workers.
constexpr const char* token = "engine-model";

}  // namespace

// ---------------------------------------------------------------------------------------------

/// The scheduler_connector behind sim_scheduler's connector calls; remembers the requests that
/// finished.
class engine_model::connector_calls final : public sim::connector_calls {
 public:
  explicit connector_calls(embed::scheduler_connector& sc) : sc_(sc) {}
  scheduler::match_result get_num_new_matched_tokens(const scheduler::request_view& req,
                                                     uint32_t num_computed) override {
    return sc_.get_num_new_matched_tokens(req, num_computed);
  }
  status update_state_after_alloc(const scheduler::request_view& req,
                                  std::span<const gpu_block> blocks,
                                  uint32_t num_external) override {
    return sc_.update_state_after_alloc(req, blocks, num_external);
  }
  bool request_finished(std::string_view id) override {
    finished.emplace_back(id);
    return sc_.request_finished(id);
  }
  /// Finished (or aborted) since the caller last took them.
  std::vector<std::string> finished;

 private:
  embed::scheduler_connector& sc_;
};

// ---------------------------------------------------------------------------------------------

engine_model::engine_model(engine_config cfg) : cfg_(std::move(cfg)) {}

engine_model::~engine_model() {
  sc_.reset();  // stops the workers (they see a clean stop) and removes the segment
  ranks_.clear();
}

result<std::unique_ptr<engine_model>> engine_model::create(engine_config cfg) {
  if (cfg.world_size == 0 || cfg.num_gpu_blocks < 2 || cfg.gpu_block_size == 0 ||
      cfg.block_size_factor == 0 || cfg.num_layers == 0 || cfg.head_dim == 0) {
    return make_error(errc::invalid_argument, "engine_model: bad geometry");
  }
  if (cfg.instance.empty()) {
    return make_error(errc::invalid_argument, "engine_model: an shm instance name is needed");
  }
  std::unique_ptr<engine_model> m(new engine_model(std::move(cfg)));
  if (auto st = m->init(); !st.ok()) return st;
  return m;
}

status engine_model::init() {
  const uint32_t bs = cfg_.gpu_block_size;
  embed::scheduler_connector_config sc;
  sc.transport = embed::step_transport::memory;
  sc.listen = false;
  sc.token = token;
  sc.topology.tp_size = cfg_.world_size;
  sc.pool = cpu_pool();
  sc.planner.gpu_block_size = bs;
  sc.planner.offloaded_block_size = bs * cfg_.block_size_factor;
  sc.planner.hash_block_size = bs;
  sc.planner.enable_prefix_caching = cfg_.enable_prefix_caching;
  sc.planner.manager.capacity = cfg_.cpu_slots;
  sc.planner.manager.policy = cfg_.policy;
  sc.job_timeout = 0ms;  // no deadlines: the tests decide when transfers complete
  sc.job_timeout_steps = 0;
  sc.make_manager = [this](const scheduler::manager_config& mc)
      -> result<std::unique_ptr<scheduler::offload_manager>> {
    auto mgr = scheduler::offload_manager::create(mc);
    if (!mgr) return mgr.error();
    auto rec = std::make_unique<recording_manager>(std::move(mgr).value());
    manager_ = rec.get();
    return std::unique_ptr<scheduler::offload_manager>(std::move(rec));
  };
  auto created = embed::scheduler_connector::create(sc);
  if (!created) return created.error();
  sc_ = std::move(created).value();
  for (rank_id r = 0; r < cfg_.world_size; ++r) {
    if (auto st = add_rank(r); !st) return st;
  }
  if (auto st = sc_->wait_for_workers(step_wait); !st) return st;

  sim::engine_limits limits;
  limits.gpu_blocks = cfg_.num_gpu_blocks;
  limits.gpu_block_size = bs;
  limits.max_running = UINT32_MAX;         // no running limit
  limits.max_batched_tokens = UINT32_MAX;  // no token budget: a prefill runs whole
  limits.enable_prefix_caching = cfg_.enable_prefix_caching;
  calls_ = std::make_unique<connector_calls>(*sc_);
  sched_ = std::make_unique<sim::sim_scheduler>(limits, *calls_);
  return {};
}

embed::pool_config engine_model::cpu_pool() const {
  const uint64_t gpu_block_bytes = uint64_t{cfg_.num_layers} * 2 * cfg_.gpu_block_size *
                                   token_bytes();  // K and V of every layer
  return {.instance = cfg_.instance,
          .slots_per_rank = cfg_.cpu_slots,
          .slot_bytes = cfg_.block_size_factor * gpu_block_bytes};
}

status engine_model::add_rank(rank_id r) {
  rank_state rk;
  embed::worker_connector_config wc;
  wc.mode = embed::connection_mode::in_process;
  wc.token = token;
  wc.topology.tp_size = cfg_.world_size;
  wc.pool = cpu_pool();
  wc.rank = r;
  wc.block_size_factor = cfg_.block_size_factor;
  const fault_plan plan = cfg_.faults ? cfg_.faults(r) : fault_plan{};
  wc.make_copy_engine = [&rk, plan]() -> result<std::unique_ptr<cuda::copy_engine>> {
    auto manual = std::make_unique<cuda::manual_copy_engine>();
    rk.manual = manual.get();
    if (plan.rules.empty()) return std::unique_ptr<cuda::copy_engine>(std::move(manual));
    auto faulty = cuda::faulty_copy_engine::make(std::move(manual), plan);
    if (!faulty) return faulty.error();
    return std::unique_ptr<cuda::copy_engine>(std::move(faulty).value());
  };
  auto w = embed::worker_connector::prepare(wc, sc_.get());
  if (!w) return w.error();
  rk.wc = std::move(w).value();

  const sim::runner_geometry g{.layers = cfg_.num_layers,
                               .page_bytes = uint64_t{2} * cfg_.gpu_block_size * token_bytes(),
                               .gpu_blocks = cfg_.num_gpu_blocks,
                               .gpu_block_size = cfg_.gpu_block_size,
                               .finish_transfers = false,
                               .kv_planes = 2};
  auto runner = sim::model_runner::create(rk.wc->copy_engine(), rk.wc.get(), r, g);
  if (!runner) return runner.error();
  rk.runner.emplace(std::move(runner).value());
  rk.runner->set_after_save([this, manual = rk.manual] {
    if (cfg_.wait_at_step_end) manual->advance_all();
    return status::success();
  });
  if (auto st = rk.wc->register_with_scheduler(); !st) return st;
  ranks_.push_back(std::move(rk));
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

  // 2. Connector metadata, sent to every rank on the step channel.
  auto meta = sc_->build_connector_meta(in);
  if (!meta) {
    rep.errors.push_back("build_connector_meta: " + meta.error().to_string());
    return rep;
  }
  rep.meta = std::move(meta).value();
  if (before_workers_) before_workers_(rep.meta);

  // 3. Every rank's model runner: its step in vLLM's worker order, around the forward.
  const sim::model_input& model = sched_->model();
  for (rank_id r = 0; r < cfg_.world_size; ++r) {
    sim::model_runner& runner = *ranks_[r].runner;
    const status st = runner.run_step(model, step_wait);
    embed::worker_step_outcome out = runner.last_step();
    if (!st) {
      const std::string_view call =
          out.failed_call.empty() ? "next_metadata_step" : out.failed_call;
      rep.errors.push_back(std::string(call) + "[" + std::to_string(r) + "]: " + st.to_string());
    }
    rep.rank_outputs.push_back(std::move(out.finished));
    rep.rank_load_errors.push_back(std::move(out.load_errors));
  }
  stats_.tokens_computed += model.writes.size();

  // 4. The coordinator's output of the step, applied by the planner.
  auto update = sc_->update_connector_output(rep.step, step_wait);
  if (!update) {
    rep.errors.push_back("update_connector_output: " + update.error().to_string());
    return rep;
  }
  rep.output = {rep.step, std::move(update->jobs)};
  rep.completions = std::move(update->completions);

  // 5. Model outputs: computed tokens, the next token, finished requests, the completions.
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
    for (rank_state& rk : ranks_) {
      const sim::runner_stats& rs = rk.runner->stats();
      if (rs.load_mismatches == rk.load_mismatches_seen) continue;
      rep.errors.push_back(
          "verify: " + std::to_string(rs.load_mismatches - rk.load_mismatches_seen) +
          " loaded blocks differ; the first: " + rs.mismatches.front());
      rk.load_mismatches_seen = rs.load_mismatches;
    }
  }
  return rep;
}

std::vector<step_report> engine_model::run_until_idle(uint32_t max_steps) {
  std::vector<step_report> out;
  for (uint32_t i = 0; i < max_steps && !idle(); ++i) {
    out.push_back(step());
    const auto& rep = out.back();
    if (!rep.errors.empty()) break;
    const bool progress = !rep.scheduled.empty() || !rep.output.jobs.empty() ||
                          !rep.completions.empty() || !rep.finished.empty();
    // Nothing to do but wait for transfers: complete them, as an engine blocks on them.
    if (!progress) {
      for (auto& rk : ranks_) rk.manual->advance_all();
    }
  }
  return out;
}

bool engine_model::idle() const {
  if (!sched_->idle() || sc_->jobs_in_flight() > 0) return false;
  for (const auto& rk : ranks_) {
    const auto& w = *rk.wc;
    if (w.queued_stores() > 0 || w.transfers_in_flight() > 0 || w.jobs_known() > 0) return false;
  }
  return finished_prev_.empty() && calls_->finished.empty();
}

// ---------------------------------------------------------------------------------------------
// Verification and introspection

std::vector<std::string> engine_model::verify_tokens(const std::vector<uint32_t>& tokens,
                                                     uint32_t n,
                                                     const std::vector<gpu_block>& blocks) {
  return check_tokens("", tokens, n, blocks);
}

std::vector<std::string> engine_model::verify() {
  std::vector<std::string> out;
  for (const sim::request_info& q : sched_->running_requests()) {
    auto lines = check_tokens(q.id, q.tokens, q.num_computed, q.blocks);
    out.insert(out.end(), std::make_move_iterator(lines.begin()),
               std::make_move_iterator(lines.end()));
  }
  return out;
}

std::vector<std::string> engine_model::check_tokens(std::string_view request,
                                                    std::span<const uint32_t> tokens, uint32_t n,
                                                    std::span<const gpu_block> blocks) {
  std::vector<std::string> out;
  for (rank_state& rk : ranks_) {
    const uint64_t before = rk.runner->stats().tokens_checked;
    auto lines = rk.runner->check_tokens(request, tokens, n, blocks);
    stats_.verified_tokens += rk.runner->stats().tokens_checked - before;
    out.insert(out.end(), std::make_move_iterator(lines.begin()),
               std::make_move_iterator(lines.end()));
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
