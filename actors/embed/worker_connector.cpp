#include "actors/embed/worker_connector.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_cast.hpp>
#include <caf/actor_companion.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/remote_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include "actors/embed/actor_host.hpp"
#include "actors/embed/local_endpoint.hpp"
#include "actors/embed/report_sequencer.hpp"
#include "actors/embed/scheduler_connector.hpp"
#include "actors/runtime/data_plane.hpp"
#include "actors/runtime/error_bridge.hpp"
#include "actors/runtime/tcp_probe.hpp"
#include "actors/runtime/handoff_queue.hpp"
#include "actors/runtime/interfaces.hpp"
#include "actors/worker/completion_stamper.hpp"
#include "actors/worker/connector_worker.hpp"
#include "cuda/engine_factory.hpp"
#include "shm/segment.hpp"
#include "shm/segment_header.hpp"

namespace kvc::embed {

using steady = std::chrono::steady_clock;
using metadata_queue = runtime::handoff_queue<connector_metadata>;

namespace {

/// While waiting for metadata on the data plane, whether the scheduler is gone (the rank's
/// actor closes the inbox) is looked at this often.
constexpr std::chrono::milliseconds gone_slice{10};

caf::actor_companion* as_companion(const caf::actor& hdl) {
  return static_cast<caf::actor_companion*>(caf::actor_cast<caf::abstract_actor*>(hdl));
}

/// Ends a companion: no more callbacks, then terminated with `reason` (its monitors get a
/// down_msg). What actor_companion::disconnect does; CAF 0.17.6 declares it but does not define
/// it. Must not run inside the companion's own callback (on_enqueue takes the callback's lock).
void end_companion(const caf::actor& hdl, caf::exit_reason reason) {
  caf::actor_companion* comp = as_companion(hdl);
  comp->on_enqueue(nullptr);
  caf::scoped_execution_unit unit{&hdl->home_system()};
  comp->cleanup(caf::make_error(reason), &unit);
}

/// Makes the rank's actor: an actor_companion, whose incoming messages are handed to a callback
/// in the sender's thread (CAF's network thread for remote senders) instead of being scheduled.
/// Metadata goes into `inbox` for the engine thread. The scheduler's stop (exit_msg) or its
/// death (down_msg of the monitor) closes the inbox and ends the companion from a short-lived
/// actor, so that the scheduler sees the rank go at once, whether or not the engine thread is
/// waiting in bind_connector_metadata. Whoever sets `ending` first ends the companion (cleanup
/// must run once).
caf::actor make_rank_actor(caf::actor_system& sys, std::shared_ptr<metadata_queue> inbox,
                           std::shared_ptr<std::atomic<bool>> ending) {
  caf::actor hdl = sys.spawn<caf::actor_companion>();
  caf::actor_companion* comp = as_companion(hdl);
  comp->on_enqueue([&sys, comp, inbox, ending](caf::mailbox_element_ptr ptr) {
    if (!ptr) return;
    caf::type_erased_tuple& content = ptr->content();
    if (content.match_elements<connector_metadata>()) {
      inbox->push(content.move_if_unshared<connector_metadata>(0));
      return;
    }
    if (!content.match_elements<caf::exit_msg>() && !content.match_elements<caf::down_msg>()) {
      return;  // nothing else is sent to a worker
    }
    inbox->close();
    if (ending->exchange(true)) return;
    // Ending it must not happen inside this callback: a one-shot actor does it.
    sys.spawn([h = caf::actor_cast<caf::actor>(comp)] {
      end_companion(h, caf::exit_reason::user_shutdown);
    });
  });
  return hdl;
}

}  // namespace

struct worker_connector::impl {
  worker_connector_config cfg;
  // Declaration order = reverse destruction order: the worker before the engine it borrows, the
  // engine before the pool mapping it registered; the rank's actor before the actor system.
  std::optional<shm::segment> segment;
  std::unique_ptr<cuda::copy_engine> engine;
  std::optional<worker::connector_worker> worker;
  std::shared_ptr<actor_host> host;
  // The rank's actor: the scheduler's metadata is handed from CAF's network thread straight to
  // the engine thread through `inbox`; reports go from the engine thread straight to the
  // coordinator. No actor is scheduled in between.
  caf::actor rank_actor;
  std::shared_ptr<std::atomic<bool>> ending = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<metadata_queue> inbox;
  runtime::coordinator_actor coordinator;
  // The ZeroMQ data plane when the scheduler uses one (else the metadata comes through `inbox`
  // and reports go to `coordinator` as CAF messages).
  std::unique_ptr<runtime::data_plane_client> dp;
  std::optional<worker::completion_stamper> stamper;
  std::optional<connector_metadata> next;   // arrived, not bound (asked for another step)
  std::optional<connector_metadata> bound;  // the bound step's metadata
  report_sequencer reports;

  ~impl() {
    // The scheduler sees the rank leave (unless its stop already ended the actor).
    if (rank_actor && !ending->exchange(true)) end_companion(rank_actor, caf::exit_reason::normal);
    rank_actor = nullptr;
    host.reset();
  }

  void send(report_sequencer::batch b) {
    if (inbox->closed()) return;  // the scheduler is gone: nobody to report to
    if (dp) {
      const runtime::step_report rep{cfg.rank, cfg.incarnation, b.step,
                                     stamper->stamp(b.step, b.jobs)};
      if (auto st = dp->send(runtime::encode(rep)); !st) {
        spdlog::error("worker_connector: rank {}: the report of step {} was not sent: {}",
                      cfg.rank, b.step, st.to_string());
      }
      return;
    }
    if (!coordinator) return;
    caf::anon_send(coordinator, runtime::report_atom::value, cfg.rank, cfg.incarnation, b.step,
                   stamper->stamp(b.step, b.jobs));
  }

  /// The next metadata from the data plane within `timeout`, or nullopt (timeout, the scheduler
  /// gone, or an error, which is returned in `err`).
  std::optional<connector_metadata> receive_metadata(std::chrono::nanoseconds timeout,
                                                     status& err) {
    const auto deadline = steady::now() + timeout;
    for (;;) {
      const auto left = deadline - steady::now();
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(
          std::max(left, steady::duration::zero()));
      auto frame = dp->receive(std::min(wait, gone_slice));
      if (!frame) {
        err = frame.error();
        return std::nullopt;
      }
      if (*frame) {
        auto meta = runtime::decode_metadata(**frame);
        if (!meta) {
          err = meta.error();
          return std::nullopt;
        }
        return std::move(meta).value();
      }
      if (inbox->closed() || steady::now() >= deadline) return std::nullopt;
    }
  }
};

worker_connector::worker_connector(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

worker_connector::~worker_connector() = default;

result<std::unique_ptr<worker_connector>> worker_connector::create(
    const worker_connector_config& cfg, scheduler_connector* local) {
  if (auto st = validate(cfg); !st) return st;
  if (cfg.mode == connection_mode::in_process && local == nullptr) {
    return make_error(errc::invalid_argument,
                      "embed: an in_process worker needs the scheduler_connector of its process");
  }
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  const std::string name = segment_name_for(cfg.pool, cfg.topology);
  const shm::pool_geometry geometry{cfg.topology.world_size(), cfg.pool.slots_per_rank,
                                    cfg.pool.slot_bytes};

  // The scheduler to register with. In connect mode its process created the pool before it
  // started listening, so the segment exists once the scheduler is reachable.
  runtime::scheduler_actor sched;
  local_endpoint ep;
  if (cfg.mode == connection_mode::in_process) {
    ep = local->endpoint();
    if (!ep.host || !ep.scheduler) {
      return make_error(errc::io_error, "embed: the scheduler connector is shut down");
    }
    p->host = ep.host;
    sched = ep.scheduler;
  } else {
    // CAF's connect has no limit of its own: find out first whether anything answers.
    if (auto st = runtime::probe_tcp(cfg.network.host, cfg.network.port, cfg.register_timeout);
        !st) {
      return make_error(st.code(), "embed: cannot reach the scheduler at " + st.message());
    }
    p->host = actor_host::start(cfg.network, /*network=*/true);
    auto s = caf::io::remote_actor<runtime::scheduler_actor>(p->host->system(), cfg.network.host,
                                                             cfg.network.port);
    if (!s) {
      return make_error(errc::io_error, "embed: cannot reach the scheduler at " + cfg.network.host +
                                            ":" + std::to_string(cfg.network.port) + ": " +
                                            p->host->system().render(s.error()));
    }
    sched = std::move(s).value();
  }

  // The rank's engine, pool region and connector worker.
  auto engine = cuda::make_copy_engine({.backend = cfg.backend, .device = cfg.device});
  if (!engine) return engine.error();
  p->engine = std::move(engine).value();
  auto seg = shm::segment::attach(name, &geometry);
  if (!seg) return seg.error();
  p->segment.emplace(std::move(seg).value());
  if (cfg.pool.prefault) {
    if (auto st = p->segment->prefault_rank(cfg.rank); !st) return st;
  }
  const auto region = p->segment->rank_region(cfg.rank);
  auto w = worker::connector_worker::create(
      {.rank = cfg.rank,
       .block_size_factor = cfg.block_size_factor,
       .pool = {region.data(), geometry.slot_stride(), cfg.pool.slots_per_rank}},
      *p->engine);
  if (!w) return w.error();
  p->worker.emplace(std::move(w).value());

  // Registration: hello to the scheduler, which answers with the coordinator to report to.
  const runtime::handshake_expectation want{.tp_size = cfg.topology.tp_size,
                                            .pp_size = cfg.topology.pp_size,
                                            .node = cfg.topology.node,
                                            .segment = name,
                                            .layout_checksum = shm::layout_checksum(geometry),
                                            .token = cfg.token};
  const runtime::worker_registration reg =
      runtime::make_registration(want, cfg.rank % cfg.topology.tp_size,
                                 cfg.rank / cfg.topology.tp_size, cfg.incarnation, ::getpid());
  caf::actor_system& sys = p->host->system();
  p->inbox = std::make_shared<metadata_queue>();
  p->rank_actor = make_rank_actor(sys, p->inbox, p->ending);
  as_companion(p->rank_actor)->monitor(sched);
  status outcome;
  std::string data_endpoint;
  {
    caf::scoped_actor self{sys};
    self->request(sched, cfg.register_timeout, runtime::hello_atom::value, reg,
                  caf::actor_cast<runtime::worker_actor>(p->rank_actor))
        .receive(
            [&](runtime::coordinator_actor& c, std::string& endpoint) {
              p->coordinator = std::move(c);
              data_endpoint = std::move(endpoint);
            },
            [&](caf::error& e) { outcome = runtime::to_status(e); });
  }
  if (!outcome) return outcome;
  // The data plane: in this process through the scheduler connector's context (inproc).
  if (!ep.data_endpoint.empty()) data_endpoint = ep.data_endpoint;
  if (!data_endpoint.empty()) {
    auto dp = runtime::data_plane_client::create(ep.data_context, data_endpoint,
                                                 {cfg.rank, cfg.incarnation, cfg.token});
    if (!dp) return dp.error();
    p->dp = std::move(dp).value();
  }
  p->stamper.emplace(cfg.rank, cfg.incarnation);
  return std::unique_ptr<worker_connector>{new worker_connector(std::move(p))};
}

cuda::copy_engine& worker_connector::copy_engine() noexcept {
  return *impl_->engine;
}

status worker_connector::register_kv_caches(std::span<const cuda::kv_tensor_desc> tensors) {
  return impl_->worker->register_kv_caches(tensors);
}

status worker_connector::register_kv_regions(std::vector<cuda::kv_region> regions,
                                             uint64_t num_gpu_blocks) {
  return impl_->worker->register_kv_regions(std::move(regions), num_gpu_blocks);
}

status worker_connector::bind_connector_metadata(step_id step, std::chrono::nanoseconds timeout) {
  impl& m = *impl_;
  if (m.reports.is_open()) {
    return make_error(errc::precondition_failed,
                      "embed: step " + std::to_string(*m.reports.last_step()) +
                          " is still bound; clear_connector_metadata first");
  }
  if (!m.next) {
    status err;
    m.next = m.dp ? m.receive_metadata(timeout, err) : m.inbox->pop_for(timeout);
    if (!m.next) {
      if (!err) return err;
      if (m.inbox->closed()) return make_error(errc::io_error, "embed: the scheduler is gone");
      return make_error(errc::timeout, "embed: rank " + std::to_string(m.cfg.rank) +
                                           ": the metadata of step " + std::to_string(step) +
                                           " did not arrive in time");
    }
  }
  if (m.next->step != step) {
    return make_error(errc::invalid_argument, "embed: the next metadata is for step " +
                                                  std::to_string(m.next->step) + ", not step " +
                                                  std::to_string(step));
  }
  if (auto st = m.reports.open(step); !st) return st;
  m.bound = std::move(m.next);
  m.next.reset();
  return m.worker->bind_connector_metadata(*m.bound);
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

finished_requests worker_connector::get_finished(std::span<const std::string> finished_req_ids) {
  impl& m = *impl_;
  worker::worker_output out = m.worker->get_finished(finished_req_ids);
  if (auto b = m.reports.add(out.jobs)) m.send(std::move(*b));
  return {std::move(out.finished_sending), std::move(out.finished_recving), std::move(out.jobs)};
}

std::vector<gpu_block> worker_connector::get_block_ids_with_load_errors() {
  return impl_->worker->get_block_ids_with_load_errors();
}

void worker_connector::clear_connector_metadata() {
  impl& m = *impl_;
  m.worker->clear_connector_metadata();
  m.bound.reset();
  if (auto b = m.reports.close()) m.send(std::move(*b));
}

rank_id worker_connector::rank() const noexcept {
  return impl_->cfg.rank;
}

bool worker_connector::connected() const noexcept {
  return !impl_->inbox->closed();
}

std::span<const std::byte> worker_connector::pool_slot(cpu_slot s) const noexcept {
  const std::byte* p = impl_->segment->slot(impl_->cfg.rank, s);
  if (p == nullptr) return {};
  return {p, impl_->segment->geometry().slot_bytes};
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

size_t worker_connector::jobs_known() const noexcept {
  return impl_->worker->jobs_known();
}

}  // namespace kvc::embed
