#include "actors/embed/worker_connector.hpp"

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

#include "actors/embed/local_endpoint.hpp"
#include "actors/embed/rank_host.hpp"
#include "actors/embed/scheduler_connector.hpp"
#include "actors/trace/traced_transport.hpp"
#include "actors/worker/file_tier_io.hpp"
#include "actors/worker/report_sequencer.hpp"
#include "actors/worker/tier_executor.hpp"
#include "disk/file_io.hpp"

namespace kvc::embed {

using steady = std::chrono::steady_clock;

namespace {

/// While waiting for metadata, whether the scheduler is gone (the rank's actor ended) is looked
/// at this often.
constexpr std::chrono::milliseconds gone_slice{10};

}  // namespace

struct worker_connector::impl {
  worker_connector_config cfg;
  // register_in_background's thread; the engine's thread joins it before it touches the
  // registration's state (host's connection, reports) again.
  std::thread joining;
  std::atomic<bool> cancel_join{false};
  status joined;  // the background registration's outcome, once joined

  ~impl() {
    cancel_join.store(true);
    if (joining.joinable()) joining.join();
  }

  /// Waits for a background registration to end (bounded by join_timeout and
  /// register_timeout); its error, again on every later call.
  status settle() {
    if (joining.joinable()) joining.join();
    return joined;
  }

  /// register_with_scheduler's work: find the scheduler (network.port 0: its port in the
  /// segment), register, open the step channel.
  status register_rank() {
    if (reports) {
      return make_error(errc::precondition_failed,
                        "embed: rank " + std::to_string(cfg.rank) + " is registered already");
    }
    if (auto st = host->connect_published(steady::now() + cfg.join_timeout, cancel_join); !st) {
      return st;
    }
    if (auto st = host->register_rank(); !st) return st;
    reports.emplace(cfg.rank, cfg.incarnation);
    return {};
  }

  // Declaration order = reverse destruction order: the worker before the engine it borrows.
  std::unique_ptr<rank_host> host;
  std::optional<worker::transfer_executor> worker;
  std::optional<connector_metadata> next;   // arrived, not bound (asked for another step)
  std::optional<connector_metadata> bound;  // the bound step's metadata
  std::optional<worker::report_sequencer> reports;
  // The file tier (none without cfg.file_tier): its I/O threads finish their queued work before
  // the pool they read and write is unmapped (declared after host).
  std::unique_ptr<disk::file_io> tier_io;
  // The executor's view of tier_io: file_tier_io over it, wrapped by cfg.wrap_tier_io if set.
  std::unique_ptr<worker::tier_io> tier_seam;
  std::optional<worker::tier_executor> tier;
  /// Without a tier: the results of tier jobs the scheduler side sent anyway (failed at once, so
  /// they fail now rather than at their deadline), for the next get_finished.
  std::vector<rank_job_result> refused_tier_jobs;
  std::shared_ptr<trace::tracer> tracer;  // null: trace off
  int64_t bound_at = 0;                   // trace: when the bound step was bound (mono ns)

  /// Opens this rank's directory of the file tier and its I/O threads (cfg.file_tier).
  status open_tier() {
    if (!cfg.file_tier) return {};
    const file_tier_config& t = *cfg.file_tier;
    auto store = disk::file_store::open(
        {.root_dir = t.root_dir,
         .run_description =
             tier_run_description(t, cfg.pool, cfg.topology, cfg.block_size_factor),
         .rank = cfg.rank,
         .payload_bytes = cfg.pool.slot_bytes,
         .direct_io = t.direct_io,
         .recycled_files =
             disk::split_capacity(t.capacity_bytes, disk::file_bytes(cfg.pool.slot_bytes))
                 .recycled_files});
    if (!store) return store.error();
    if (!(*store)->direct_io_note().empty()) {
      spdlog::info("worker rank {}: file tier without O_DIRECT: {}", cfg.rank,
                   (*store)->direct_io_note());
    }
    const auto engine = disk::io_engine_named(t.io_engine);
    if (!engine) {
      return make_error(errc::invalid_argument, "file tier: io_engine '" + t.io_engine +
                                                    "' is none of auto, io_uring, threads");
    }
    auto io = disk::file_io::create(std::move(*store), {.n_read_threads = t.n_read_threads,
                                                        .n_write_threads = t.n_write_threads,
                                                        .engine = *engine,
                                                        .io_depth = t.io_depth});
    if (!io) return io.error();
    if (!(*io)->engine_note().empty()) {
      spdlog::info("worker rank {}: file tier I/O: {}", cfg.rank, (*io)->engine_note());
    }
    tier_io = std::move(*io);
    auto faults = tier_fault_decider::make(cfg.faults, cfg.rank);
    if (!faults) return faults.error();
    std::optional<tier_fault_decider> injected;
    if (!faults->empty()) injected.emplace(std::move(faults).value());
    tier_seam = std::make_unique<worker::file_tier_io>(*tier_io);
    if (cfg.wrap_tier_io) tier_seam = cfg.wrap_tier_io(std::move(tier_seam));
    tier.emplace(*tier_seam, host->region(), cfg.pool.slot_bytes, std::move(injected));
    return {};
  }

  void refuse_tier_jobs(const connector_metadata& meta) {
    for (const tier_job& j : meta.tier_jobs) {
      refused_tier_jobs.push_back(
          {.job = j.id,
           .kind = j.kind,
           .ok = false,
           .error = errc::precondition_failed,
           .detail = "rank " + std::to_string(cfg.rank) + " has no file tier (file_tier_config)"});
    }
  }

  /// trace: the step's metadata was bound; at `jobs`, one record per job the rank takes on.
  void trace_bind(const connector_metadata& meta) {
    bound_at = trace::tracer::mono_now();
    if (!tracer->jobs()) return;
    for (const auto* list : {&meta.loads, &meta.stores}) {
      for (const transfer_job& j : *list) {
        trace::trace_record r;
        r.mono_ns = bound_at;
        r.track = trace::rank_track(cfg.rank);
        r.type = "job_submit";
        r.step = static_cast<int64_t>(meta.step);
        r.rank = cfg.rank;
        r.job = static_cast<int64_t>(j.id);
        r.request = j.request_id;
        r.bytes = (j.slots.size() - std::min<size_t>(j.skip, j.slots.size())) * cfg.pool.slot_bytes;
        r.note = to_string(j.kind);
        tracer->emit(std::move(r));
      }
    }
  }

  /// trace: the rank handled the step from bind to its report (a span); at `jobs`, one record
  /// per finished job.
  void trace_done(step_id step, const std::vector<rank_job_result>& jobs, bool closed) {
    const int64_t now = trace::tracer::mono_now();
    if (tracer->jobs()) {
      for (const rank_job_result& j : jobs) {
        trace::trace_record r;
        r.mono_ns = now;
        r.track = trace::rank_track(cfg.rank);
        r.type = "job_complete";
        r.step = static_cast<int64_t>(step);
        r.rank = cfg.rank;
        r.job = j.job;
        r.bytes = j.bytes;
        r.dur_ns = static_cast<int64_t>(j.seconds * 1e9);
        r.note = std::string{to_string(j.kind)} + " " + outcome_text(j);
        tracer->emit(std::move(r));
      }
    }
    if (!closed || bound_at == 0) return;
    trace::trace_record r;
    r.mono_ns = now;
    r.dur_ns = std::max<int64_t>(now - bound_at, 1);
    r.track = trace::rank_track(cfg.rank);
    r.type = "rank_step";
    r.step = static_cast<int64_t>(step);
    r.rank = cfg.rank;
    tracer->emit(std::move(r));
    bound_at = 0;
  }

  void send(const step_report& rep) {
    if (host->gone()) return;  // the scheduler is gone: nobody to report to
    if (auto st = host->channel().send_report(rep); !st) {
      spdlog::error("worker_connector: rank {}: the report of step {} was not sent: {}", cfg.rank,
                    rep.step, st.to_string());
    }
  }

  /// The next metadata within `timeout`. errc::timeout when none came, errc::io_error when the
  /// scheduler is gone, the channel's error for a frame that is not metadata.
  result<connector_metadata> receive(std::chrono::nanoseconds timeout) {
    if (!reports) {
      return make_error(errc::precondition_failed,
                        "embed: rank " + std::to_string(cfg.rank) + " is not registered yet");
    }
    const auto deadline = steady::now() + timeout;
    for (;;) {
      const auto left = std::max(deadline - steady::now(), steady::duration::zero());
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(left);
      auto m = host->channel().next_step(std::min(wait, gone_slice));
      if (!m) return m.error();
      if (*m) return std::move(**m);
      if (host->gone()) {
        return make_error(errc::io_error, host->stopped() ? "embed: the scheduler stopped this rank"
                                                          : "embed: the scheduler is gone");
      }
      if (steady::now() >= deadline) {
        return make_error(errc::timeout, "embed: rank " + std::to_string(cfg.rank) +
                                             ": no metadata arrived in time");
      }
    }
  }
};

worker_connector::worker_connector(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

worker_connector::~worker_connector() = default;

result<std::unique_ptr<worker_connector>> worker_connector::create(
    const worker_connector_config& cfg, scheduler_connector* local) {
  auto w = prepare(cfg, local);
  if (!w) return w.error();
  if (auto st = (*w)->register_with_scheduler(); !st) return st;
  return w;
}

status worker_connector::register_with_scheduler() {
  if (auto st = impl_->settle(); !st) return st;
  return impl_->register_rank();
}

status worker_connector::register_in_background() {
  impl& m = *impl_;
  if (m.joining.joinable() || m.reports) {
    return make_error(errc::precondition_failed,
                      "embed: rank " + std::to_string(m.cfg.rank) + " is registered already");
  }
  m.joining = std::thread([&m] { m.joined = m.register_rank(); });
  return {};
}

result<std::unique_ptr<worker_connector>> worker_connector::prepare(
    const worker_connector_config& cfg, scheduler_connector* local) {
  if (auto st = validate(cfg); !st) return st;
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  std::optional<local_endpoint> ep;
  if (local != nullptr) ep = local->endpoint();
  auto host = rank_host::open(cfg, ep ? &*ep : nullptr);
  if (!host) return host.error();
  p->host = std::move(host).value();
  auto w = worker::transfer_executor::create(
      {.rank = cfg.rank, .block_size_factor = cfg.block_size_factor, .pool = p->host->region()},
      p->host->engine());
  if (!w) return w.error();
  p->worker.emplace(std::move(w).value());
  if (auto st = p->open_tier(); !st) return st;
  p->tracer = p->host->tracer();
  return std::unique_ptr<worker_connector>{new worker_connector(std::move(p))};
}

fault_counts worker_connector::injected_faults() const noexcept {
  fault_counts counts = impl_->host->injected_faults();
  if (impl_->tier) {
    counts[static_cast<size_t>(fault_kind::fail_io)] += impl_->tier->injected_failures();
  }
  return counts;
}

cuda::copy_engine& worker_connector::copy_engine() noexcept {
  return impl_->host->engine();
}

status worker_connector::register_kv_caches(std::span<const cuda::kv_tensor_desc> tensors) {
  return impl_->worker->register_kv_caches(tensors);
}

status worker_connector::register_kv_regions(std::vector<cuda::kv_region> regions,
                                             uint64_t num_gpu_blocks) {
  return impl_->worker->register_kv_regions(std::move(regions), num_gpu_blocks);
}

result<step_id> worker_connector::next_metadata_step(std::chrono::nanoseconds timeout) {
  impl& m = *impl_;
  if (auto st = m.settle(); !st) return st;
  if (!m.next) {
    auto meta = m.receive(timeout);
    if (!meta) return meta.error();
    m.next = std::move(meta).value();
  }
  return m.next->step;
}

result<step_id> worker_connector::bind_next_connector_metadata(std::chrono::nanoseconds timeout) {
  auto step = next_metadata_step(timeout);
  if (!step) return step.error();
  if (auto st = bind_connector_metadata(*step, timeout); !st) return st;
  return *step;
}

status worker_connector::bind_connector_metadata(step_id step, std::chrono::nanoseconds timeout) {
  impl& m = *impl_;
  if (auto st = m.settle(); !st) return st;
  if (!m.reports) {
    return make_error(errc::precondition_failed,
                      "embed: rank " + std::to_string(m.cfg.rank) + " is not registered yet");
  }
  if (m.reports->is_open()) {
    return make_error(errc::precondition_failed,
                      "embed: step " + std::to_string(*m.reports->last_step()) +
                          " is still bound; clear_connector_metadata first");
  }
  if (!m.next) {
    auto meta = m.receive(timeout);
    if (!meta) {
      if (meta.error().code() != errc::timeout) return meta.error();
      return make_error(errc::timeout, "embed: rank " + std::to_string(m.cfg.rank) +
                                           ": the metadata of step " + std::to_string(step) +
                                           " did not arrive in time");
    }
    m.next = std::move(meta).value();
  }
  if (m.next->step != step) {
    return make_error(errc::invalid_argument, "embed: the next metadata is for step " +
                                                  std::to_string(m.next->step) + ", not step " +
                                                  std::to_string(step));
  }
  if (auto st = m.reports->open(step); !st) return st;
  m.bound = std::move(m.next);
  m.next.reset();
  if (m.tracer) m.trace_bind(*m.bound);
  status waited;
  if (m.tier) {
    // The flush names failed jobs whose slots the pool gave back: their transfers here end
    // before a promotion of this step may write one (the tier's own flushed jobs end inside
    // start(), before its removals and jobs); if that wait fails, the step's tier jobs fail.
    if (!m.bound->tier_jobs.empty()) waited = m.worker->wait_transfers(m.bound->flush);
    m.tier->start(*m.bound, waited);
  } else {
    m.refuse_tier_jobs(*m.bound);
  }
  if (auto st = m.worker->bind_connector_metadata(*m.bound); !st) return st;
  return waited;
}

const connector_metadata* worker_connector::metadata() const noexcept {
  return impl_->bound ? &*impl_->bound : nullptr;
}

status worker_connector::handle_preemptions(const cuda::submit_options& opts) {
  return impl_->worker->handle_preemptions(opts);
}

status worker_connector::start_load_kv(const cuda::submit_options& opts) {
  return impl_->worker->start_load_kv(opts);
}

status worker_connector::wait_for_save() {
  return impl_->worker->wait_for_save();
}

status worker_connector::finish_transfers(const cuda::submit_options& opts) {
  impl_->worker->submit_deferred_stores(opts);
  finish_tier_jobs();
  return impl_->worker->wait_in_flight();
}

void worker_connector::finish_tier_jobs() {
  if (impl_->tier) impl_->tier->wait_all();
}

finished_requests worker_connector::get_finished(std::span<const std::string> finished_req_ids) {
  impl& m = *impl_;
  worker::worker_output out = m.worker->get_finished(finished_req_ids);
  auto tier_jobs = m.tier ? m.tier->take_finished() : std::exchange(m.refused_tier_jobs, {});
  out.jobs.insert(out.jobs.end(), std::make_move_iterator(tier_jobs.begin()),
                  std::make_move_iterator(tier_jobs.end()));
  for (const rank_job_result& j : out.jobs) {
    if (!j.ok) spdlog::warn("worker rank {}: {}", m.cfg.rank, failure_line(j));
  }
  if (m.settle() && m.reports) {  // else not registered: nobody to report to
    auto report = m.reports->add(out.jobs);
    if (m.tracer && m.bound) m.trace_done(m.bound->step, out.jobs, report.has_value());
    if (report) m.send(*report);
  }
  return {std::move(out.finished_sending), std::move(out.finished_recving), std::move(out.jobs)};
}

std::vector<gpu_block> worker_connector::get_block_ids_with_load_errors() {
  return impl_->worker->get_block_ids_with_load_errors();
}

void worker_connector::clear_connector_metadata() {
  impl& m = *impl_;
  m.worker->clear_connector_metadata();
  m.bound.reset();
  if (!m.settle() || !m.reports) return;  // not registered: nobody to report to
  auto report = m.reports->close();
  if (m.tracer && report) m.trace_done(report->step, {}, true);
  if (report) m.send(*report);
}

rank_id worker_connector::rank() const noexcept {
  return impl_->cfg.rank;
}

status worker_connector::device_health() const {
  return impl_->host->engine().health();
}

bool worker_connector::connected() const noexcept {
  return !impl_->host->gone();
}

bool worker_connector::stopped() const noexcept {
  return impl_->host->stopped();
}

std::span<const std::byte> worker_connector::pool_slot(cpu_slot s) const noexcept {
  const shm::segment& pool = impl_->host->pool();
  const std::byte* p = pool.slot(impl_->cfg.rank, s);
  if (p == nullptr) return {};
  return {p, pool.geometry().slot_bytes};
}

const cuda::kv_layout* worker_connector::layout() const noexcept {
  const auto& l = impl_->worker->layout();
  return l ? &*l : nullptr;
}

size_t worker_connector::transfers_in_flight() const noexcept {
  return impl_->worker->transfers_in_flight();
}

size_t worker_connector::queued_stores() const noexcept {
  return impl_->worker->queued_stores();
}

size_t worker_connector::tracked_requests() const noexcept {
  return impl_->worker->tracked_requests();
}

size_t worker_connector::tier_jobs_in_flight() const noexcept {
  return impl_->tier ? impl_->tier->jobs_in_flight() : 0;
}

worker::tier_io_stats worker_connector::tier_stats() const noexcept {
  return impl_->tier ? impl_->tier->stats() : worker::tier_io_stats{};
}

size_t worker_connector::jobs_known() const noexcept {
  return impl_->worker->jobs_known();
}

}  // namespace kvc::embed
