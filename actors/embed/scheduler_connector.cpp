#include "actors/embed/scheduler_connector.hpp"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "actors/embed/scheduler_host.hpp"
#include "actors/kv_events/batch_encoder.hpp"
#include "actors/kv_events/publisher.hpp"
#include "actors/metrics/metrics_server.hpp"
#include "actors/metrics/published.hpp"
#include "actors/metrics/scheduler_metrics.hpp"
#include "actors/record/recorder.hpp"
#include "disk/file_store.hpp"
#include "proto/private_files.hpp"

namespace kvc::embed {

using steady = std::chrono::steady_clock;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
          .count());
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct scheduler_connector::impl {
  scheduler_connector_config cfg;
  std::unique_ptr<scheduler::planner> planner;
  /// observe.record: the run's record (declared before host: it outlives the coordinator,
  /// which records into it).
  std::unique_ptr<record::recorder> recorder;
  std::unique_ptr<scheduler_host> host;
  std::optional<step_id> last_step;  // the last step sent
  step_id through = 0;               // the highest step whose output was applied
  std::vector<job_result> jobs;      // applied, not yet handed out
  std::shared_ptr<trace::tracer> tracer;  // null: trace off
  /// A worker has attached over the step channel: the coordinator decides job outcomes, the
  /// engine's request-level sets only release requests (apply_request_output).
  bool workers_attached = false;

  /// trace: a scheduler-side record of one step; `value` is the planner's jobs in flight. At
  /// `jobs`, a "pool_slots" record beside it: `value` the CPU pool's slots in use (the
  /// manager's tracked blocks), `bytes` the pool's capacity in slots.
  void trace_step(const char* type, step_id step, int64_t mono_ns, int64_t dur_ns) {
    trace::trace_record r;
    r.mono_ns = mono_ns;
    r.dur_ns = dur_ns;
    r.track = "scheduler";
    r.type = type;
    r.step = static_cast<int64_t>(step);
    r.value = static_cast<int64_t>(planner->jobs_in_flight());
    tracer->emit(std::move(r));
    if (!tracer->jobs()) return;
    trace::trace_record pool;
    pool.mono_ns = mono_ns;
    pool.track = "scheduler";
    pool.type = "pool_slots";
    pool.step = static_cast<int64_t>(step);
    pool.value = static_cast<int64_t>(planner->manager().size());
    pool.bytes = planner->manager().capacity();
    tracer->emit(std::move(pool));
  }

  /// trace at `jobs`: one record per job planned (with its request) or applied.
  void trace_job(const char* type, step_id step, job_id job, const std::string& request,
                 uint64_t bytes, std::string note) {
    trace::trace_record r;
    r.track = "scheduler";
    r.type = type;
    r.step = static_cast<int64_t>(step);
    r.job = static_cast<int64_t>(job);
    r.request = request;
    r.bytes = bytes;
    r.note = std::move(note);
    tracer->emit(std::move(r));
  }

  // Observability (docs/observability.md). The counters live in the pure classes; `metrics`
  // adds the flow's own (transfers, round trips). With a /metrics server, the engine thread
  // publishes a sample after each step and the server's thread renders the latest one.
  metrics::scheduler_metrics metrics;
  coordinator::aggregator_stats coordinator_stats;  // the last seen (kept after shutdown)
  uint32_t ranks_alive = 0;
  uint64_t frames_dropped = 0;
  std::shared_ptr<metrics::published<metrics::scheduler_sample>> snapshots;
  std::unique_ptr<metrics::metrics_server> server;
  std::unique_ptr<kv_events::publisher> events;
  kv_events::batch_options batch;
  bool cleared = false;  // AllBlocksCleared sent (at shutdown)

  coordinator::blocking_coordinator& coord() { return host->coordinator(); }

  std::vector<std::pair<std::string, uint64_t>> fired() const {
    std::vector<std::pair<std::string, uint64_t>> out;
    const fault_counts counts = host->faults().injected;
    for (size_t k = 0; k < counts.size(); ++k) {
      if (counts[k] != 0) out.emplace_back(to_string(static_cast<fault_kind>(k)), counts[k]);
    }
    return out;
  }

  metrics::scheduler_sample sample() {
    if (host->live()) {
      coordinator_stats = coord().core().aggregator().stats();
      ranks_alive = coord().routed_ranks();
      frames_dropped = coord().channel().dropped_frames();
    }
    const scheduler::offload_manager& mgr = planner->manager();
    return metrics.sample({.planner = &planner->stats(),
                           .coordinator = &coordinator_stats,
                           .stores_skipped = mgr.stores_skipped(),
                           .pool_capacity = mgr.capacity(),
                           .pool_used = mgr.size(),
                           .jobs_in_flight = planner->jobs_in_flight(),
                           .world_size = cfg.topology.world_size(),
                           .ranks_alive = ranks_alive,
                           .frames_dropped = frames_dropped,
                           .faults_fired = fired()});
  }

  /// The end of a step's work on this thread: publish the manager's events and a sample.
  void after_step() {
    publish_events();
    if (snapshots) snapshots->publish(sample());
  }

  /// The pool's events, then the file tier's (medium FS).
  std::vector<kv_event> take_all_events() {
    auto evs = planner->take_events();
    auto tier = planner->take_tier_events();
    evs.insert(evs.end(), std::make_move_iterator(tier.begin()),
               std::make_move_iterator(tier.end()));
    return evs;
  }

  void publish_events() {
    if (!events) return;
    auto evs = take_all_events();
    if (evs.empty()) return;
    events->publish(kv_events::encode_batch(wall_seconds(), evs, batch));
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
      const int64_t t0 = tracer ? trace::tracer::mono_now() : 0;
      if (auto st = planner->update_connector_output(*out); !st) {
        spdlog::warn("scheduler_connector: step {}: {}", out->step, st.to_string());
      }
      for (const job_result& j : out->jobs) {
        if (!j.ok) spdlog::warn("scheduler: step {}: {}", out->step, failure_line(j));
      }
      metrics.on_output_applied(*out, now_ns());
      if (tracer) {
        const int64_t t1 = trace::tracer::mono_now();
        if (tracer->jobs()) {
          for (const job_result& j : out->jobs) {
            trace_job("job_applied", out->step, j.job, {}, j.bytes, outcome_text(j));
          }
        }
        trace_step("output_applied", out->step, t1, std::max<int64_t>(t1 - t0, 1));
      }
      jobs.insert(jobs.end(), out->jobs.begin(), out->jobs.end());
      through = std::max(through, out->step);
    }
  }

  status start_observers() {
    const observe_config& o = cfg.observe;
    if (!o.kv_events_endpoint.empty()) {
      batch.block_size = planner->geometry().offloaded_block_size;
      kv_events::publisher_options po;
      po.endpoint = o.kv_events_endpoint;
      po.replay_endpoint = o.kv_events_replay_endpoint;
      po.topic = o.kv_events_topic;
      po.buffer = o.kv_events_buffer;
      auto pub = kv_events::publisher::start(po);
      if (!pub) return pub.error();
      events = std::move(pub).value();
    }
    if (o.serve_metrics) {
      snapshots = std::make_shared<metrics::published<metrics::scheduler_sample>>();
      snapshots->publish(sample());
      auto scrapes = std::make_shared<std::atomic<uint64_t>>(0);
      auto srv = metrics::metrics_server::start(
          cfg.network.host, o.metrics_port, [snap = snapshots, scrapes] {
            std::string text = metrics::render(*snap->get());
            spdlog::debug("metrics: scrape {} served", scrapes->fetch_add(1) + 1);
            return text;
          });
      if (!srv) return srv.error();
      server = std::move(srv).value();
    }
    return status::success();
  }

  /// observe.record: opens `<record_dir>/scheduler-<pid>.kvcrec` (creating the directory,
  /// 0700, when it is missing) and attaches it to the coordinator.
  status start_recorder() {
    const observe_config& o = cfg.observe;
    if (!o.record) return status::success();
    const std::string dir = o.record_dir.empty() ? o.trace_dir : o.record_dir;
    if (auto st = make_private_dir(dir); !st) {
      return make_error(st.code(), "record: " + st.message());
    }
    const std::string path = dir + "/scheduler-" + std::to_string(::getpid()) + ".kvcrec";
    auto r = record::recorder::open(path, {cfg.planner, coord().options()});
    if (!r) return r.error();
    recorder = std::move(r).value();
    coord().record_to(recorder.get());
    spdlog::info("scheduler_connector: recording the run to {}", path);
    return status::success();
  }

  /// Closes the record (after the coordinator stopped); a write error is logged.
  void stop_recorder() {
    if (!recorder) return;
    if (auto st = recorder->close(); !st) spdlog::error("{}", st.to_string());
  }

  connector_update collect() {
    if (recorder) recorder->take_completions();
    return {planner->take_request_completions(), std::exchange(jobs, {}), through};
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
    p->cfg.planner.file_tier = scheduler::file_tier_limits{
        .capacity_bytes = cfg.file_tier->capacity_bytes,
        .block_file_bytes = disk::file_bytes(cfg.pool.slot_bytes),
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
  p->tracer = p->host->tracer();
  if (auto st = p->start_recorder(); !st) return st;
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
  if (impl_->recorder) impl_->recorder->match(req, num_computed, got);
  return got;
}

status scheduler_connector::update_state_after_alloc(const scheduler::request_view& req,
                                                     std::span<const gpu_block> block_ids,
                                                     uint32_t num_external) {
  auto st = impl_->planner->update_state_after_alloc(req, block_ids, num_external);
  if (impl_->recorder) impl_->recorder->alloc(req, block_ids, num_external, st.ok());
  return st;
}

status scheduler_connector::update_state_after_alloc(const scheduler::request_view& req,
                                                     const scheduler::block_table_view& blocks,
                                                     uint32_t num_external) {
  auto st = impl_->planner->update_state_after_alloc(req, blocks, num_external);
  if (impl_->recorder) impl_->recorder->alloc(req, blocks, num_external, st.ok());
  return st;
}

status scheduler_connector::apply_request_output(
    std::span<const std::string_view> finished_sending,
    std::span<const std::string_view> finished_recving) {
  impl& m = *impl_;
  m.note_workers();
  const scheduler::request_output out{finished_sending, finished_recving,
                                      m.workers_attached
                                          ? scheduler::request_output_role::releases_requests
                                          : scheduler::request_output_role::completes_jobs};
  auto st = m.planner->update_connector_output(out);
  if (m.recorder) m.recorder->request_output(out);
  impl_->after_step();
  return st;
}

status scheduler_connector::apply_job_results(const connector_output& out) {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  if (m.recorder) {
    return make_error(errc::precondition_failed,
                      "embed: job results from outside the step channel cannot be recorded "
                      "(observe.record is on)");
  }
  auto st = m.planner->update_connector_output(out);
  m.after_step();
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
  const int64_t t0 = m.tracer ? trace::tracer::mono_now() : 0;
  auto meta = m.planner->build_connector_meta(in);
  if (m.recorder) m.recorder->build(in, meta ? &*meta : nullptr);
  if (!meta) return meta;
  m.last_step = in.step;
  if (m.tracer && m.tracer->jobs()) {
    for (const auto* list : {&meta->loads, &meta->stores}) {
      for (const transfer_job& j : *list) {
        const uint64_t blocks = j.slots.size() - std::min<size_t>(j.skip, j.slots.size());
        m.trace_job("job_planned", in.step, j.id, j.request_id, blocks * m.cfg.pool.slot_bytes,
                    std::string{to_string(j.kind)});
      }
    }
  }
  m.coord().send_step(*meta);
  m.note_workers();
  m.metrics.on_step_sent(*meta, now_ns());
  m.publish_events();  // the evictions that made room for this step's stores
  if (m.tracer) {
    const int64_t t1 = trace::tracer::mono_now();
    m.trace_step("build_connector_meta", in.step, t1, std::max<int64_t>(t1 - t0, 1));
  }
  return meta;
}

result<connector_update> scheduler_connector::update_connector_output() {
  impl& m = *impl_;
  if (auto st = m.check_live(); !st) return st;
  m.coord().take_arrived();
  m.apply_released();
  m.after_step();
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
  m.after_step();
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
  if (impl_->recorder) impl_->recorder->finished(req_id, delay_free);
  return delay_free;
}

std::vector<kv_event> scheduler_connector::take_events() {
  if (impl_->events) return {};  // they went to the publisher
  return impl_->take_all_events();
}

std::string scheduler_connector::metrics_text() {
  return metrics::render(impl_->sample());
}

uint16_t scheduler_connector::metrics_port() const noexcept {
  return impl_->server ? impl_->server->port() : 0;
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
  if (m.host->live()) m.sample();  // keep the coordinator's last counters for later scrapes
  auto stopped = m.host->stop(timeout);
  m.tracer.reset();  // with the host's: the last owner completes the trace file
  m.stop_recorder();
  if (m.events) {
    m.publish_events();
    // The pool is gone with the process: its blocks are, for a subscriber, all cleared.
    if (!m.cleared) m.events->publish(kv_events::encode_cleared(wall_seconds(), m.batch));
    m.cleared = true;
  }
  if (m.snapshots) m.snapshots->publish(m.sample());
  return stopped;
}

}  // namespace kvc::embed
