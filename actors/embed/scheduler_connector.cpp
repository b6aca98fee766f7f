#include "actors/embed/scheduler_connector.hpp"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/publish.hpp>
#include <caf/io/remote_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>

#include "actors/coordinator/coordinator_actor.hpp"
#include "actors/embed/actor_host.hpp"
#include "actors/embed/engine_data_plane.hpp"
#include "actors/embed/local_endpoint.hpp"
#include "actors/runtime/error_bridge.hpp"
#include "actors/runtime/tcp_probe.hpp"
#include "actors/scheduler/scheduler_actor.hpp"
#include "shm/segment.hpp"
#include "shm/segment_header.hpp"

namespace kvc::embed {

using steady = std::chrono::steady_clock;

namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
          .count());
}

/// While waiting on the data plane, the engine thread's mailbox (rank_down from the scheduler
/// actor, a dead actor) is looked at this often.
constexpr std::chrono::milliseconds mailbox_slice{10};

}  // namespace

struct scheduler_connector::impl {
  scheduler_connector_config cfg;
  std::string segment_name;
  std::unique_ptr<scheduler::connector_scheduler> planner;
  // Declaration order = reverse destruction order: the actors end before the segment goes.
  std::optional<shm::segment> segment;
  std::shared_ptr<actor_host> host;
  // The engine thread's own actor: the coordinator's sink, so that each step's output goes from
  // the coordinator straight into this thread's mailbox (no relay through another actor).
  std::optional<caf::scoped_actor> self;
  scheduler::scheduler_impl actor;         // invalid after shutdown
  runtime::coordinator_actor coordinator;  // invalid after shutdown
  // connect mode: the `kvconnect scheduler` process's scheduler; invalid after shutdown.
  runtime::scheduler_service_actor remote;
  // The ZeroMQ data plane (data_plane zmq): this thread plays the coordinator.
  std::unique_ptr<engine_data_plane> dp;
  uint16_t port = 0;
  bool gone = false;                 // the scheduler or the coordinator ended unexpectedly
  std::optional<step_id> last_step;  // the last step sent
  step_id through = 0;               // the highest step whose output was applied
  std::vector<job_result> jobs;      // applied, not yet handed out

  bool live() const noexcept { return actor || remote; }

  void apply(const connector_output& out) {
    if (auto st = planner->update_connector_output(out); !st) {
      spdlog::warn("scheduler_connector: step {}: {}", out.step, st.to_string());
    }
    jobs.insert(jobs.end(), out.jobs.begin(), out.jobs.end());
    through = std::max(through, out.step);
  }

  /// Takes one message from the mailbox, waiting up to `timeout`. False when none came.
  bool receive_one(std::chrono::nanoseconds timeout) {
    bool got = true;
    (*self)->receive([&](connector_output& out) { apply(out); },
                     // From the scheduler actor when this thread hosts the coordinator (dp).
                     [&](runtime::rank_up_atom, rank_id rank, uint32_t incarnation) {
                       if (dp) dp->rank_up(rank, incarnation);
                     },
                     [&](runtime::rank_down_atom, rank_id rank) {
                       if (dp) dp->rank_down(rank);
                     },
                     [&](caf::down_msg& dm) {
                       if (dm.source == actor.address() || dm.source == coordinator.address() ||
                           dm.source == remote.address()) {
                         spdlog::error("scheduler_connector: the {} ended: {}",
                                       dm.source == coordinator.address() ? "coordinator"
                                                                          : "scheduler",
                                       host->system().render(dm.reason));
                         gone = true;
                       }
                     },
                     caf::after(timeout) >> [&] { got = false; });
    return got;
  }

  /// Handles what is in the mailbox, without waiting. The emptiness check comes first: a CAF
  /// receive with a timeout, even zero, arms a timer on the actor clock's thread (a wake-up).
  void apply_arrived() {
    while (!(*self)->mailbox().empty() && receive_one(std::chrono::nanoseconds::zero())) {
    }
  }

  /// Data plane: handles the frames that arrive within `wait` (and what is already there),
  /// expires deadlines, applies the released step outputs.
  void pump_data_plane(std::chrono::milliseconds wait) {
    dp->pump(wait);
    if (dp->needs_tick()) dp->tick(now_ns());
    while (auto out = dp->poll_output()) apply(*out);
  }

  /// Everything that has arrived: the mailbox first (rank_up before a rank's hello).
  void take_arrived() {
    apply_arrived();
    if (dp) pump_data_plane(std::chrono::milliseconds::zero());
  }

  /// Waits up to `left` for something to arrive (data plane: in slices, see mailbox_slice).
  void wait_some(steady::duration left) {
    if (!dp) {
      receive_one(left);
      return;
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(left);
    if (wait < left) wait += std::chrono::milliseconds{1};  // round up: never spin
    pump_data_plane(std::min(wait, mailbox_slice));
    apply_arrived();
  }

  connector_update collect() {
    return {planner->take_request_completions(), std::exchange(jobs, {}), through};
  }

  /// connect mode: reaches the scheduler process and subscribes this thread's actor to its step
  /// outputs, presenting the token and the pool's identity (checked like rank 0's).
  status connect() {
    caf::actor_system& sys = host->system();
    // CAF's connect has no limit of its own: find out first whether anything answers.
    if (auto st = runtime::probe_tcp(cfg.network.host, cfg.network.port, cfg.register_timeout);
        !st) {
      return make_error(st.code(), "embed: cannot reach the scheduler process at " + st.message());
    }
    auto r = caf::io::remote_actor<runtime::scheduler_service_actor>(sys, cfg.network.host,
                                                                    cfg.network.port);
    if (!r) {
      return make_error(errc::io_error, "embed: cannot reach the scheduler process at " +
                                            cfg.network.host + ":" +
                                            std::to_string(cfg.network.port) + ": " +
                                            sys.render(r.error()));
    }
    runtime::handshake_expectation want{
        .tp_size = cfg.topology.tp_size,
        .pp_size = cfg.topology.pp_size,
        .node = cfg.topology.node,
        .segment = segment_name,
        .layout_checksum = shm::layout_checksum(shm::pool_geometry{
            cfg.topology.world_size(), cfg.pool.slots_per_rank, cfg.pool.slot_bytes}),
        .token = cfg.token};
    const auto reg = runtime::make_registration(want, 0, 0, 0, ::getpid());
    status st;
    (*self)
        ->request(*r, cfg.register_timeout, runtime::engine_hello_atom::value, reg,
                  caf::actor_cast<runtime::output_sink_actor>(caf::actor{*self}))
        .receive([](uint32_t) {}, [&](caf::error& e) { st = runtime::to_status(e); });
    if (!st) return make_error(st.code(), "embed: the scheduler process refused: " + st.message());
    remote = std::move(*r);
    (*self)->monitor(remote);
    return status::success();
  }
};

scheduler_connector::scheduler_connector(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

scheduler_connector::~scheduler_connector() {
  if (auto r = shutdown(std::chrono::seconds{5}); !r) {
    spdlog::warn("scheduler_connector: shutdown: {}", r.error().to_string());
  }
}

result<std::unique_ptr<scheduler_connector>> scheduler_connector::create(
    const scheduler_connector_config& cfg) {
  if (auto st = validate(cfg); !st) return st;
  auto p = std::make_unique<impl>();
  p->cfg = cfg;
  p->cfg.planner.manager.capacity = cfg.pool.slots_per_rank;
  p->segment_name = segment_name_for(cfg.pool, cfg.topology);
  if (cfg.mode == connection_mode::connect) p->cfg.listen = false;

  // The planner: the engine thread's part.
  if (cfg.make_manager) {
    auto m = cfg.make_manager(p->cfg.planner.manager);
    if (!m) return m.error();
    if (!*m) return make_error(errc::invalid_argument, "embed: make_manager returned null");
    auto s = scheduler::connector_scheduler::create(p->cfg.planner, std::move(m).value());
    if (!s) return s.error();
    p->planner = std::move(s).value();
  } else {
    auto s = scheduler::connector_scheduler::create(p->cfg.planner);
    if (!s) return s.error();
    p->planner = std::move(s).value();
  }

  if (cfg.mode == connection_mode::connect) {  // the process owns the pool and the actors
    p->host = actor_host::start(cfg.network, /*network=*/true);
    p->self.emplace(p->host->system());
    if (auto st = p->connect(); !st) return st;
    return std::unique_ptr<scheduler_connector>{new scheduler_connector(std::move(p))};
  }

  // The node's pool.
  const shm::pool_geometry geometry{cfg.topology.world_size(), cfg.pool.slots_per_rank,
                                    cfg.pool.slot_bytes};
  auto seg = shm::segment::create(p->segment_name, geometry,
                                  {.prefault = cfg.pool.prefault, .remove_on_close = true});
  if (!seg) return seg.error();
  p->segment.emplace(std::move(seg).value());
  const uint64_t checksum = p->segment->layout_checksum();

  // The actors. From here on the connector's destructor cleans up after a failure.
  p->host = actor_host::start(cfg.network, cfg.listen);
  std::unique_ptr<scheduler_connector> sc{new scheduler_connector(std::move(p))};
  impl& m = *sc->impl_;
  caf::actor_system& sys = m.host->system();
  m.self.emplace(sys);
  runtime::coordinator_actor coordinator_role;
  if (cfg.data_plane == data_plane_kind::zmq) {
    // This thread is the coordinator: the scheduler actor's rank_up / rank_down come here.
    auto dp = engine_data_plane::create(cfg.topology.world_size(), cfg.job_timeout,
                                        cfg.listen ? cfg.network.host : std::string{}, cfg.token);
    if (!dp) return dp.error();
    m.dp = std::move(dp).value();
    coordinator_role = caf::actor_cast<runtime::coordinator_actor>(caf::actor{*m.self});
  } else {
    coordinator::coordinator_options copts;
    copts.world_size = cfg.topology.world_size();
    copts.job_timeout = cfg.job_timeout;
    auto coord = coordinator::spawn_coordinator(
        sys, caf::actor_cast<runtime::output_sink_actor>(caf::actor{*m.self}), copts);
    if (!coord) return coord.error();
    m.coordinator = std::move(coord).value();
    (*m.self)->monitor(m.coordinator);
    coordinator_role = m.coordinator;
  }
  scheduler::scheduler_options so;
  so.handshake = {.tp_size = cfg.topology.tp_size,
                  .pp_size = cfg.topology.pp_size,
                  .node = cfg.topology.node,
                  .segment = m.segment_name,
                  .layout_checksum = checksum,
                  .token = cfg.token};
  if (m.dp) so.data_endpoint = m.dp->server().tcp_endpoint();
  // The scheduler's own output queue stays empty: the coordinator reports to this connector.
  auto actor = scheduler::spawn_scheduler(sys, so, std::make_shared<scheduler::output_queue>(),
                                          coordinator_role);
  if (!actor) return actor.error();
  m.actor = std::move(actor).value();
  (*m.self)->monitor(m.actor);
  if (cfg.listen) {
    auto port = caf::io::publish(caf::actor_cast<runtime::scheduler_actor>(m.actor),
                                 cfg.network.port, cfg.network.host.c_str());
    if (!port) {
      return make_error(errc::io_error, "embed: cannot listen on " + cfg.network.host + ":" +
                                            std::to_string(cfg.network.port) + ": " +
                                            m.host->system().render(port.error()));
    }
    m.port = *port;
  }
  return sc;
}

uint16_t scheduler_connector::port() const noexcept {
  return impl_->port;
}

const std::string& scheduler_connector::segment_name() const noexcept {
  return impl_->segment_name;
}

const scheduler_connector_config& scheduler_connector::config() const noexcept {
  return impl_->cfg;
}

local_endpoint scheduler_connector::endpoint() const {
  const impl& m = *impl_;
  local_endpoint ep{m.host, caf::actor_cast<runtime::scheduler_actor>(m.actor), {}, nullptr};
  if (m.dp) {
    ep.data_endpoint = m.dp->server().inproc_endpoint();
    ep.data_context = m.dp->server().context();
  }
  return ep;
}

status scheduler_connector::wait_for_workers(std::chrono::milliseconds timeout) {
  impl& m = *impl_;
  if (!m.live()) return make_error(errc::io_error, "embed: the scheduler connector is shut down");
  status st;
  runtime::scheduler_service_actor target =
      m.remote ? m.remote : caf::actor_cast<runtime::scheduler_service_actor>(m.actor);
  const auto deadline = steady::now() + timeout;
  (*m.self)
      ->request(target, timeout, runtime::ready_atom::value)
      .receive([](uint32_t) {}, [&](caf::error& e) { st = runtime::to_status(e); });
  if (!st || !m.dp) return st;
  // Every rank registered; their data-plane hellos may still be on their way.
  const uint32_t world = m.cfg.topology.world_size();
  m.take_arrived();
  while (m.dp->routed_ranks() < world && !m.gone && steady::now() < deadline) {
    m.wait_some(deadline - steady::now());
  }
  if (m.gone) return make_error(errc::io_error, "embed: the scheduler actors are gone");
  if (m.dp->routed_ranks() < world) {
    return make_error(errc::timeout, "embed: " + std::to_string(m.dp->routed_ranks()) + " of " +
                                         std::to_string(world) +
                                         " ranks connected their data plane in time");
  }
  return st;
}

scheduler::match_result scheduler_connector::get_num_new_matched_tokens(
    const scheduler::request_view& req, uint32_t num_computed) {
  return impl_->planner->get_num_new_matched_tokens(req, num_computed);
}

status scheduler_connector::update_state_after_alloc(const scheduler::request_view& req,
                                                     std::span<const gpu_block> block_ids,
                                                     uint32_t num_external) {
  return impl_->planner->update_state_after_alloc(req, block_ids, num_external);
}

result<connector_metadata> scheduler_connector::build_connector_meta(
    const scheduler::step_input& in) {
  impl& m = *impl_;
  if (!m.live()) return make_error(errc::io_error, "embed: the scheduler connector is shut down");
  if (m.last_step && in.step <= *m.last_step) {
    return make_error(errc::invalid_argument, "embed: step " + std::to_string(in.step) +
                                                  " is not above the last step " +
                                                  std::to_string(*m.last_step));
  }
  auto meta = m.planner->build_connector_meta(in);
  if (!meta) return meta;
  m.last_step = in.step;
  if (m.remote) {
    (*m.self)->send(m.remote, runtime::submit_atom::value, *meta);
  } else if (m.dp) {
    m.take_arrived();  // rank_up / rank_down and hellos first: route the step to the live ranks
    m.dp->send_step(*meta, now_ns());
  } else {
    (*m.self)->send(m.actor, *meta);
  }
  return meta;
}

result<connector_update> scheduler_connector::update_connector_output() {
  impl& m = *impl_;
  if (!m.live()) return make_error(errc::io_error, "embed: the scheduler connector is shut down");
  m.take_arrived();
  if (m.gone) return make_error(errc::io_error, "embed: the scheduler actors are gone");
  return m.collect();
}

result<connector_update> scheduler_connector::update_connector_output(
    step_id step, std::chrono::nanoseconds timeout) {
  impl& m = *impl_;
  if (!m.live()) return make_error(errc::io_error, "embed: the scheduler connector is shut down");
  const auto deadline = steady::now() + timeout;
  m.take_arrived();
  while (m.through < step && !m.gone) {
    const auto now = steady::now();
    if (now >= deadline) break;
    m.wait_some(deadline - now);
  }
  if (m.gone) {
    return make_error(errc::io_error, "embed: the scheduler actors are gone (step " +
                                          std::to_string(step) + " never completed)");
  }
  if (m.through < step) {
    return make_error(errc::timeout,
                      "embed: the output of step " + std::to_string(step) +
                          " did not arrive in time (last: " + std::to_string(m.through) + ")");
  }
  m.take_arrived();
  return m.collect();
}

bool scheduler_connector::request_finished(std::string_view req_id) {
  return impl_->planner->request_finished(req_id);
}

std::vector<kv_event> scheduler_connector::take_events() {
  return impl_->planner->take_events();
}

const scheduler::connector_stats& scheduler_connector::stats() const noexcept {
  return impl_->planner->stats();
}

size_t scheduler_connector::jobs_in_flight() const noexcept {
  return impl_->planner->jobs_in_flight();
}

size_t scheduler_connector::tracked_requests() const noexcept {
  return impl_->planner->tracked_requests();
}

const scheduler::connector_scheduler& scheduler_connector::planner() const noexcept {
  return *impl_->planner;
}

result<uint32_t> scheduler_connector::shutdown(std::chrono::milliseconds timeout) {
  impl& m = *impl_;
  if (!m.host) return 0u;
  uint32_t stopped = 0;
  status st;
  if (m.actor) {
    (*m.self)
        ->request(m.actor, timeout, scheduler::stop_atom::value)
        .receive([&](uint32_t n) { stopped = n; },
                 [&](caf::error& e) { st = runtime::to_status(e); });
    caf::anon_send_exit(m.actor, caf::exit_reason::user_shutdown);
    m.actor = nullptr;
  }
  // connect mode: the process keeps its workers; ending this thread's actor unsubscribes.
  m.remote = nullptr;
  if (m.coordinator) {
    caf::anon_send_exit(m.coordinator, caf::exit_reason::user_shutdown);
    m.coordinator = nullptr;
  }
  m.self.reset();
  m.dp.reset();
  m.host.reset();     // the last owner waits for the actors to end
  m.segment.reset();  // removes the segment's name
  if (!st) return st;
  return stopped;
}

}  // namespace kvc::embed
