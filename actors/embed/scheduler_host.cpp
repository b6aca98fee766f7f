#include "actors/embed/scheduler_host.hpp"

#include <utility>

#include <spdlog/spdlog.h>
#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/publish.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "actors/channel/faulty_server_transport.hpp"
#include "actors/channel/memory_transport.hpp"
#include "actors/channel/zmq_transport.hpp"
#include "actors/control/error_bridge.hpp"
#include "actors/control/gate.hpp"
#include "actors/embed/node_pool.hpp"
#include "actors/trace/traced_transport.hpp"
#include "shm/segment_header.hpp"

namespace kvc::embed {

namespace {

using steady = std::chrono::steady_clock;

result<std::unique_ptr<channel::server_transport>> make_bare_transport(
    const scheduler_connector_config& cfg) {
  if (cfg.transport == step_transport::memory) {
    return std::unique_ptr<channel::server_transport>{new channel::memory_server()};
  }
  auto z = channel::zmq_server::create(cfg.listen ? cfg.network.host : std::string{}, cfg.token);
  if (!z) return z.error();
  return std::unique_ptr<channel::server_transport>{std::move(z).value()};
}

/// The transport, wrapped by cfg.wrap_transport when one is set (fault injection, recording).
result<std::unique_ptr<channel::server_transport>> make_transport(
    const scheduler_connector_config& cfg) {
  auto t = make_bare_transport(cfg);
  if (!t || !cfg.wrap_transport) return t;
  auto wrapped = cfg.wrap_transport(std::move(t).value());
  if (!wrapped) return make_error(errc::invalid_argument, "wrap_transport returned no transport");
  return wrapped;
}

}  // namespace

result<std::unique_ptr<scheduler_host>> scheduler_host::start(
    const scheduler_connector_config& cfg) {
  std::unique_ptr<scheduler_host> h{new scheduler_host()};
  h->world_size_ = cfg.topology.world_size();
  h->segment_name_ = segment_name_for(cfg.pool, cfg.topology);
  const shm::pool_geometry geometry{h->world_size_, cfg.pool.slots_per_rank, cfg.pool.slot_bytes};
  auto seg = open_node_pool(h->segment_name_, geometry, cfg.pool, pool_side::scheduler,
                            steady::now() + cfg.ready_timeout);
  if (!seg) return seg.error();
  h->segment_.emplace(std::move(seg).value());
  if (cfg.observe.trace != trace::trace_level::off) {
    auto t = trace::tracer::open(cfg.observe.trace, cfg.observe.trace_dir, "scheduler",
                                 "node" + std::to_string(cfg.topology.node), cfg.topology.node);
    if (!t) return t.error();
    h->tracer_ = std::move(t).value();
  }

  auto transport = make_transport(cfg);
  if (!transport) return transport.error();
  if (!faults_at(cfg.faults, fault_site::channel).empty()) {
    // The step channel's fault seam: every fault that fires is counted, logged and traced here.
    auto faulty = channel::faulty_server_transport::make(
        std::move(transport).value(), cfg.faults,
        [host = h.get()](const channel::channel_fault& f) {
          ++host->injected_[static_cast<size_t>(f.kind)];
          spdlog::warn("fault injected: {} of rank {} step {} (fault spec {})",
                       to_string(f.kind), f.rank, f.step, f.spec);
          if (host->tracer_) {
            trace::trace_record r;
            r.track = "scheduler";
            r.type = "fault";
            r.step = static_cast<int64_t>(f.step);
            r.rank = f.rank;
            r.note = std::string{to_string(f.kind)} + " (fault spec " + std::to_string(f.spec) + ")";
            host->tracer_->emit(std::move(r));
          }
        });
    if (!faulty) return faulty.error();
    transport = std::unique_ptr<channel::server_transport>{std::move(faulty).value()};
  }
  if (h->tracer_) {
    // Outermost: the records show what the channel's logic received, after injected faults.
    transport = std::unique_ptr<channel::server_transport>{
        new trace::traced_server_transport(std::move(transport).value(), h->tracer_)};
  }
  auto channel =
      channel::scheduler_channel::create(std::move(transport).value(), h->world_size_, cfg.token);
  if (!channel) return channel.error();
  h->host_ = actor_host::start(cfg.network, cfg.listen);
  // From here on ~scheduler_host cleans up after a failure.
  auto coord = coordinator::blocking_coordinator::create(
      h->host_->system(),
      {.world_size = h->world_size_,
       .job_timeout = cfg.job_timeout,
       .job_timeout_steps = cfg.job_timeout_steps},
      std::move(channel).value());
  if (!coord) return coord.error();
  h->coordinator_ = std::move(coord).value();

  scheduler::scheduler_options so;
  so.handshake = {.topology = cfg.topology,
                  .segment = h->segment_name_,
                  .layout_checksum = h->segment_->layout_checksum(),
                  .token = cfg.token,
                  .nodes = cfg.nodes};
  so.channel_endpoint = h->coordinator_->transport_endpoint();
  so.tracer = h->tracer_;
  auto actor = scheduler::spawn_scheduler(h->host_->system(), so, h->coordinator_->handle());
  if (!actor) return actor.error();
  h->scheduler_ = std::move(actor).value();
  h->coordinator_->watch(caf::actor_cast<caf::actor>(h->scheduler_));
  if (cfg.listen) {
    // CAF listens on loopback only, on a port of its own; peers reach it through the gate, which
    // admits only connections that present the token (control/gate.hpp).
    auto inner = caf::io::publish(caf::actor_cast<control::scheduler_actor>(h->scheduler_),
                                  uint16_t{0}, "127.0.0.1");
    if (!inner) {
      return make_error(errc::io_error, "embed: cannot listen on 127.0.0.1: " +
                                            h->host_->system().render(inner.error()));
    }
    auto gate = control::gatekeeper::start(cfg.network.host, cfg.network.port, *inner, cfg.token);
    if (!gate) {
      return make_error(gate.error().code(), "embed: cannot listen on " + cfg.network.host + ":" +
                                                 std::to_string(cfg.network.port) + ": " +
                                                 gate.error().message());
    }
    h->gate_ = std::move(gate).value();
    h->port_ = h->gate_->port();
    // Workers built before this side (port 0 in their config) find it here.
    if (!h->segment_->publish_scheduler_port(h->port_)) {
      h->port_ = 0;  // not this side's to withdraw
      return make_error(errc::shm_error, "embed: segment " + h->segment_name_ +
                                             " is served by another scheduler side (port " +
                                             std::to_string(h->segment_->scheduler_port()) + ")");
    }
  }
  return h;
}

scheduler_host::~scheduler_host() {
  if (auto r = stop(std::chrono::seconds{5}); !r) {
    spdlog::warn("scheduler_connector: shutdown: {}", r.error().to_string());
  }
}

local_endpoint scheduler_host::endpoint() const {
  if (!scheduler_) return {};
  return {host_, caf::actor_cast<control::scheduler_actor>(scheduler_),
          &coordinator_->channel_transport()};
}

status scheduler_host::wait_ready(std::chrono::milliseconds timeout) {
  if (!live()) return make_error(errc::io_error, "embed: the scheduler connector is shut down");
  const auto deadline = steady::now() + timeout;
  status st;
  {
    caf::scoped_actor self{host_->system()};
    self->request(scheduler_, timeout, control::ready_atom::value)
        .receive([](uint32_t) {}, [&](caf::error& e) { st = control::to_status(e); });
  }
  if (!st) return st;
  // Every rank registered; their hellos on the step channel may still be on their way.
  coordinator::blocking_coordinator& c = *coordinator_;
  c.take_arrived();
  while (c.routed_ranks() < world_size_ && !c.gone() && steady::now() < deadline) {
    c.wait_some(deadline - steady::now());
  }
  if (c.gone()) return make_error(errc::io_error, "embed: the scheduler actor is gone");
  if (c.routed_ranks() < world_size_) {
    return make_error(errc::timeout, "embed: " + std::to_string(c.routed_ranks()) + " of " +
                                         std::to_string(world_size_) +
                                         " ranks connected their step channel in time");
  }
  return st;
}

fault_stats scheduler_host::faults() const {
  if (!coordinator_) return stopped_faults_;
  const auto& s = coordinator_->core().stats();
  fault_stats f;
  f.injected = injected_;
  f.duplicates = s.duplicates;
  f.late_reports = s.late;
  f.timed_out = s.timed_out;
  f.rejected_reports = s.rejected;
  f.dropped_frames = coordinator_->channel().dropped_frames();
  return f;
}

result<uint32_t> scheduler_host::stop(std::chrono::milliseconds timeout) {
  if (!host_) return 0u;
  uint32_t stopped = 0;
  status st;
  if (port_ != 0) segment_->withdraw_scheduler_port(port_);  // no worker finds this side now
  if (scheduler_) {
    caf::scoped_actor self{host_->system()};
    self->request(scheduler_, timeout, control::stop_atom::value)
        .receive([&](uint32_t n) { stopped = n; },
                 [&](caf::error& e) { st = control::to_status(e); });
    caf::anon_send_exit(scheduler_, caf::exit_reason::user_shutdown);
    scheduler_ = nullptr;
  }
  gate_.reset();  // no new peer from here on
  stopped_faults_ = faults();
  coordinator_.reset();  // its scoped actor ends here
  host_.reset();         // the last owner waits for the actors to end
  tracer_.reset();       // nothing records any more: the trace file is complete
  segment_.reset();      // removes the segment's name
  if (!st) return st;
  return stopped;
}

}  // namespace kvc::embed
