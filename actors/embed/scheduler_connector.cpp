#include "actors/embed/scheduler_connector.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "actors/embed/kv_event_observer.hpp"
#include "actors/embed/metrics_observer.hpp"
#include "actors/embed/record_observer.hpp"
#include "actors/embed/scheduler_host.hpp"
#include "actors/embed/step_observer.hpp"
#include "actors/embed/trace_observer.hpp"
#include "disk/file_store.hpp"

namespace kvc::embed {

using steady = std::chrono::steady_clock;

struct scheduler_connector::impl {
  scheduler_connector_config cfg;
  std::unique_ptr<scheduler::planner> planner;
  std::unique_ptr<scheduler_host> host;
  /// What watches the facade (step_observer.hpp), called in this order at every event: the
  /// record (observe.record), the KV-event publisher (observe.kv_events_endpoint), the metrics
  /// (always), the trace (observe.trace). Declared after host: they go first (the record's
  /// decorator at the coordinator's core keeps the recorder until the coordinator goes).
  std::vector<std::unique_ptr<step_observer>> observers;
  metrics_observer* metrics = nullptr;  // in observers, always
  kv_event_observer* events = nullptr;  // in observers with observe.kv_events_endpoint
  bool observer_takes_events = false;   // take_events() hands out nothing
  std::optional<step_id> last_step;  // the last step sent
  step_id through = 0;               // the highest step whose output was applied
  std::vector<job_result> jobs;      // applied, not yet handed out
  /// A worker has attached over the step channel: the coordinator decides job outcomes, the
  /// engine's request-level sets only release requests (apply_request_output).
  bool workers_attached = false;
  std::vector<job_id> outside_jobs;  ///< apply_job_results' ids, reused

  coordinator::blocking_coordinator& coord() { return host->coordinator(); }

  /// Calls `event` on every observer, in order.
  template <class Event>
  void notify(Event&& event) {
    for (const auto& o : observers) event(*o);
  }

  /// A restart: the blocks rank 0's directory of the file tier holds (oldest first) are tracked
  /// as on disk; a block another rank lacks fails its file check and is dropped.
  status adopt_tier_blocks() {
    if (!cfg.file_tier) return {};
    const file_tier_config& t = *cfg.file_tier;
    auto store = disk::file_store::open(
        {.root_dir = t.root_dir,
         .run_description =
             tier_run_description(t, cfg.pool, cfg.topology, planner->geometry().factor),
         .rank = 0,
         .payload_bytes = cfg.pool.slot_bytes,
         .direct_io = t.direct_io});
    if (!store) return store.error();
    planner->adopt_tier_blocks((*store)->found_at_open());
    if (!(*store)->found_at_open().empty()) {
      spdlog::info("scheduler: the file tier holds {} blocks of this run already ({})",
                   (*store)->found_at_open().size(), (*store)->rank_dir());
    }
    return {};
  }

  /// Sticky: a rank that attached once makes the run live, even after it is lost.
  void note_workers() {
    if (!workers_attached && host->live()) workers_attached = coord().routed_ranks() > 0;
  }

  status check_live() const {
    if (!host->live()) {
      return make_error(errc::io_error,
                        "embed: the scheduler connector is shut down or its "
                        "scheduler actor is gone");
    }
    return {};
  }

  /// Applies every step output the coordinator released.
  void apply_released() {
    while (auto out = coord().poll_output()) {
      const int64_t started = trace::tracer::mono_now();
      for (const job_result& j : out->jobs) {
        if (j.ok) continue;
        if (planner->settled(j.job)) {  // the engine's sets completed it; this changes nothing
          spdlog::debug("scheduler: step {}: settled already: {}", out->step, failure_line(j));
        } else {
          spdlog::warn("scheduler: step {}: {}", out->step, failure_line(j));
        }
      }
      if (auto st = planner->update_connector_output(*out); !st) {
        spdlog::warn("scheduler_connector: step {}: {}", out->step, st.to_string());
      }
      notify([&](step_observer& o) { o.on_output_applied(*out, started); });
      jobs.insert(jobs.end(), out->jobs.begin(), out->jobs.end());
      through = std::max(through, out->step);
    }
  }

  /// The observers observe.* asks for, in the order of `observers`.
  status start_observers() {
    const observe_config& o = cfg.observe;
    if (o.record) {
      auto r = record_observer::start(cfg, coord());
      if (!r) return r.error();
      observers.push_back(std::move(r).value());
    }
    if (!o.kv_events_endpoint.empty()) {
      auto e = kv_event_observer::start(o, *planner);
      if (!e) return e.error();
      events = e->get();
      observers.push_back(std::move(e).value());
    }
    auto m = metrics_observer::start(cfg, *planner, *host);
    if (!m) return m.error();
    metrics = m->get();
    observers.push_back(std::move(m).value());
    if (host->tracer()) {
      observers.push_back(
          std::make_unique<trace_observer>(host->tracer(), *planner, cfg.pool.slot_bytes));
    }
    for (const auto& obs : observers) observer_takes_events |= obs->takes_kv_events();
    return status::success();
  }

  connector_update collect() {
    notify([](step_observer& o) { o.on_completions_taken(); });
    return {planner->take_request_completions(), std::exchange(jobs, {}), through};
  }

  /// The end of a call that applied outputs or outcomes.
  void call_end() {
    notify([](step_observer& o) { o.on_call_end(); });
  }
};

scheduler_connector::scheduler_connector(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

scheduler_connector::~scheduler_connector() = default;

result<std::unique_ptr<scheduler_connector>> scheduler_connector::create(
    const scheduler_connector_config& cfg) {
  if (auto st = validate(cfg); !st) return st;
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->cfg.planner.manager.capacity = cfg.pool.slots_per_rank;
  if (cfg.file_tier) {
    // The ranks' recycled files come out of the capacity: blocks + recycled files fit in it.
    const uint64_t block_file_bytes = disk::file_bytes(cfg.pool.slot_bytes);
    p->cfg.planner.file_tier = scheduler::file_tier_limits{
        .capacity_bytes =
            disk::split_capacity(cfg.file_tier->capacity_bytes, block_file_bytes).ledger_bytes,
        .block_file_bytes = block_file_bytes,
        .max_pending_cascades = cfg.file_tier->max_pending_cascades};
  }
  if (cfg.make_manager) {
    auto m = cfg.make_manager(p->cfg.planner.manager);
    if (!m) return m.error();
    if (!*m) return make_error(errc::invalid_argument, "embed: make_manager returned null");
    auto s = scheduler::planner::create(p->cfg.planner, std::move(m).value());
    if (!s) return s.error();
    p->planner = std::move(s).value();
  } else {
    auto s = scheduler::planner::create(p->cfg.planner);
    if (!s) return s.error();
    p->planner = std::move(s).value();
  }
  if (auto st = p->adopt_tier_blocks(); !st) return st;
  auto host = scheduler_host::start(p->cfg);
  if (!host) return host.error();
  p->host = std::move(host).value();
  if (auto st = p->start_observers(); !st) return st;
  return std::unique_ptr<scheduler_connector>{new scheduler_connector(std::move(p))};
}

uint16_t scheduler_connector::port() const noexcept {
  return impl_->host->port();
}

const std::string& scheduler_connector::segment_name() const noexcept {
  return impl_->host->segment_name();
}

const scheduler_connector_config& scheduler_connector::config() const noexcept {
  return impl_->cfg;
}

local_endpoint scheduler_connector::endpoint() const {
  return impl_->host->endpoint();
}

status scheduler_connector::wait_for_workers(std::chrono::milliseconds timeout) {
  return impl_->host->wait_ready(timeout);
}

scheduler::match_result scheduler_connector::get_num_new_matched_tokens(
    const scheduler::request_view& req, uint32_t num_computed) {
  auto got = impl_->planner->get_num_new_matched_tokens(req, num_computed);
  impl_->notify([&](step_observer& o) { o.on_match(req, num_computed, got); });
  return got;
}

status scheduler_connector::update_state_after_alloc(const scheduler::request_view& req,
                                                     std::span<const gpu_block> block_ids,
                                                     uint32_t num_external) {
  auto st = impl_->planner->update_state_after_alloc(req, block_ids, num_external);
  impl_->notify([&](step_observer& o) { o.on_alloc(req, block_ids, num_external, st.ok()); });
  return st;
}

status scheduler_connector::update_state_after_alloc(const scheduler::request_view& req,
                                                     const scheduler::block_table_view& blocks,
                                                     uint32_t num_external) {
  auto st = impl_->planner->update_state_after_alloc(req, blocks, num_external);
  impl_->notify([&](step_observer& o) { o.on_alloc_table(req, blocks, num_external, st.ok()); });
  return st;
}

status scheduler_connector::apply_request_output(std::span<const std::string_view> finished_sending,
                                                 std::span<const std::string_view> finished_recving,
                                                 std::span<const gpu_block> invalid_block_ids) {
  impl& m = *impl_;
  m.note_workers();
  const scheduler::request_output out{finished_sending, finished_recving,
                                      m.workers_attached
                                          ? scheduler::request_output_role::releases_requests
                                          : scheduler::request_output_role::completes_jobs,
                                      invalid_block_ids};
  auto st = m.planner->update_connector_output(out);
  m.notify([&](step_observer& o) { o.on_request_output(out); });
  // The engine's word completed these jobs: the coordinator stops waiting for reports that no
  // worker will send (their deadlines would fail them, long after, and the map would grow).
  m.coord().forget_jobs(m.planner->jobs_completed_by_engine());
  m.call_end();
  return st;
}

status scheduler_connector::apply_job_results(const connector_output& out) {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  for (const auto& o : m.observers) {
    if (auto st = o->admit_outside_results(); !st) return st;
  }
  auto st = m.planner->update_connector_output(out);
  // Results from outside the step channel: the coordinator no longer waits for these jobs.
  m.outside_jobs.clear();
  for (const job_result& r : out.jobs) m.outside_jobs.push_back(r.job);
  m.coord().forget_jobs(m.outside_jobs);
  m.call_end();
  return st;
}

result<connector_metadata> scheduler_connector::build_connector_meta(
    const scheduler::step_input& in) {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  if (m.last_step && in.step <= *m.last_step) {
    return make_error(errc::invalid_argument, "embed: step " + std::to_string(in.step) +
                                                  " is not above the last step " +
                                                  std::to_string(*m.last_step));
  }
  if (!m.last_step && !m.host->created_segment()) {
    // The workers were there first (vLLM's order): every rank joins before the first step.
    if (auto st = m.host->wait_ready(m.cfg.ready_timeout); !st) {
      return make_error(st.code(), "embed: before the first step: " + st.message());
    }
  }
  const int64_t started = trace::tracer::mono_now();
  auto meta = m.planner->build_connector_meta(in);
  m.notify([&](step_observer& o) { o.on_step_built(in, meta ? &*meta : nullptr); });
  if (!meta) return meta;
  m.last_step = in.step;
  m.coord().send_step(*meta);
  m.note_workers();
  m.notify([&](step_observer& o) { o.on_step_sent(*meta, started); });
  return meta;
}

result<connector_update> scheduler_connector::update_connector_output() {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  m.coord().take_arrived();
  m.apply_released();
  m.call_end();
  if (auto st = m.check_live(); !st) return st;
  return m.collect();
}

result<connector_update> scheduler_connector::update_connector_output(
    step_id step, std::chrono::nanoseconds timeout) {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  const auto deadline = steady::now() + timeout;
  m.coord().take_arrived();
  m.apply_released();
  while (m.through < step && m.host->live()) {
    const auto now = steady::now();
    if (now >= deadline) break;
    m.coord().wait_some(deadline - now);
    m.apply_released();
  }
  if (m.through < step && m.host->live()) {
    // One look at the clock past this wait's deadline: a step deadline that passed before it
    // (the coordinator's job_timeout from planning, no longer than this wait) releases the step
    // here, however the last wait slice ended.
    m.coord().take_arrived();
    m.apply_released();
  }
  m.call_end();
  if (!m.host->live()) {
    return make_error(errc::io_error, "embed: the scheduler actor is gone (step " +
                                          std::to_string(step) + " never completed)");
  }
  if (m.through < step) {
    return make_error(errc::timeout,
                      "embed: the output of step " + std::to_string(step) +
                          " did not arrive in time (last: " + std::to_string(m.through) + ")");
  }
  return m.collect();
}

bool scheduler_connector::request_finished(std::string_view req_id) {
  const bool delay_free = impl_->planner->request_finished(req_id);
  impl_->notify([&](step_observer& o) { o.on_request_finished(req_id, delay_free); });
  return delay_free;
}

std::vector<kv_event> scheduler_connector::take_events() {
  if (impl_->observer_takes_events) return {};  // they went to the publisher
  return impl_->planner->take_all_events();
}

status scheduler_connector::reset_cache() {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  // what was stored or evicted before the reset goes out before it
  m.notify([](step_observer& o) { o.on_reset_requested(); });
  auto st = m.planner->reset();
  m.notify([&](step_observer& o) { o.on_reset(st.ok(), m.last_step.value_or(0)); });
  if (!st) return st;
  spdlog::info("scheduler_connector: CPU pool reset; {} job(s) in flight, flushed next step",
               m.planner->jobs_in_flight());
  return st;
}

std::string scheduler_connector::metrics_text() {
  return metrics::render(impl_->metrics->sample());
}

uint16_t scheduler_connector::metrics_port() const noexcept {
  return impl_->metrics->port();
}

std::string scheduler_connector::kv_events_endpoint() const {
  return impl_->events ? impl_->events->endpoint() : std::string{};
}

std::string scheduler_connector::kv_events_replay_endpoint() const {
  return impl_->events ? impl_->events->replay_endpoint() : std::string{};
}
fault_stats scheduler_connector::fault_statistics() const { return impl_->host->faults(); }

const scheduler::connector_stats& scheduler_connector::stats() const noexcept {
  return impl_->planner->stats();
}

rank_changes scheduler_connector::ranks_changed() const noexcept {
  const auto st = impl_->host->coordinator_stats();
  return {.losses = st.rank_losses, .restarts = st.rank_restarts};
}

std::vector<lost_rank> scheduler_connector::lost_ranks() const {
  if (!impl_->host->live()) return {};
  std::vector<lost_rank> out;
  for (const auto& l : impl_->host->coordinator().core().aggregator().lost_ranks()) {
    out.push_back({l.rank, l.incarnation});
  }
  return out;
}

size_t scheduler_connector::jobs_in_flight() const noexcept {
  return impl_->planner->jobs_in_flight();
}

size_t scheduler_connector::tracked_requests() const noexcept {
  return impl_->planner->tracked_requests();
}

scheduler_connector::table_sizes scheduler_connector::tables() const {
  const auto& coord = impl_->host->coordinator();
  const auto agg = coord.core().aggregator().table_sizes();
  return {.planner = impl_->planner->tables(),
          .coordinator_jobs = agg.jobs,
          .coordinator_deadlines = agg.deadlines,
          .coordinator_unstamped = agg.unstamped,
          .coordinator_ready_steps = agg.ready_steps,
          .coordinator_remembered = agg.remembered,
          .channel_queued_steps = coord.channel().queued_steps()};
}

std::span<const std::byte> scheduler_connector::pool_slot(rank_id rank, cpu_slot s) const noexcept {
  return impl_->host->pool_slot(rank, s);
}

const scheduler::planner& scheduler_connector::planner() const noexcept {
  return *impl_->planner;
}

result<uint32_t> scheduler_connector::shutdown(std::chrono::milliseconds timeout) {
  impl& m = *impl_;
  m.notify([](step_observer& o) { o.on_stopping(); });
  auto stopped = m.host->stop(timeout);
  m.notify([](step_observer& o) { o.on_stopped(); });
  return stopped;
}

}  // namespace kvc::embed
