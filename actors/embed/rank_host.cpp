#include "actors/embed/rank_host.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <utility>

#include <caf/actor_cast.hpp>
#include <caf/actor_companion.hpp>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/io/remote_actor.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/scoped_execution_unit.hpp>
#include <caf/system_messages.hpp>

#include "actors/channel/zmq_transport.hpp"
#include "actors/control/error_bridge.hpp"
#include "actors/control/gate.hpp"
#include "actors/control/tcp_probe.hpp"
#include "actors/embed/node_pool.hpp"
#include "actors/scheduler/handshake.hpp"
#include "actors/trace/traced_transport.hpp"
#include "cuda/engine_factory.hpp"
#include "cuda/faulty_copy_engine.hpp"
#include "shm/segment_header.hpp"

namespace kvc::embed {

namespace {

/// How often a rank waiting for its scheduler side looks at the node's segment for its port.
constexpr std::chrono::milliseconds publish_slice{10};

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

/// The rank's actor: an actor_companion, whose messages are handed to a callback in the
/// sender's thread instead of being scheduled (nothing of the rank runs in the actor system).
/// The scheduler's stop, an exit, or the scheduler's death (down_msg of the monitor) sets
/// `ending` to why and ends the companion from a short-lived actor, so that the scheduler sees
/// the rank go at once. Whoever sets `ending` first ends the companion (cleanup must run once).
caf::actor make_rank_actor(caf::actor_system& sys, std::shared_ptr<std::atomic<uint8_t>> ending,
                           std::shared_ptr<trace::tracer> tracer, rank_id rank,
                           uint32_t incarnation) {
  caf::actor hdl = sys.spawn<caf::actor_companion>();
  caf::actor_companion* comp = as_companion(hdl);
  comp->on_enqueue([&sys, comp, ending, tracer, rank, incarnation](caf::mailbox_element_ptr ptr) {
    if (!ptr) return;
    caf::type_erased_tuple& content = ptr->content();
    const bool lost = content.match_elements<caf::down_msg>();
    if (!lost && !content.match_elements<control::stop_atom>() &&
        !content.match_elements<caf::exit_msg>()) {
      return;  // nothing else is sent to a rank
    }
    if (tracer) {
      trace::trace_record r;
      r.track = trace::rank_track(rank);
      r.rank = rank;
      if (content.match_elements<control::stop_atom>()) {
        r.dir = trace::direction::receive;
        r.type = "stop";
        r.msg = trace::message_id("stop", -1, channel::peer_id(rank, incarnation));
      } else {
        r.type = lost ? "scheduler_lost" : "exit";
      }
      tracer->emit(std::move(r));
    }
    uint8_t live = 0;
    if (!ending->compare_exchange_strong(live,
                                         lost ? rank_host::lost_reason : rank_host::stop_reason)) {
      return;
    }
    // Ending it must not happen inside this callback: a one-shot actor does it.
    sys.spawn([h = caf::actor_cast<caf::actor>(comp)] {
      end_companion(h, caf::exit_reason::user_shutdown);
    });
  });
  return hdl;
}

}  // namespace

result<std::unique_ptr<rank_host>> rank_host::open(const worker_connector_config& cfg,
                                                   const local_endpoint* local) {
  if (cfg.mode == connection_mode::in_process && local == nullptr) {
    return make_error(errc::invalid_argument,
                      "embed: an in_process worker needs the scheduler_connector of its process");
  }
  std::unique_ptr<rank_host> h{new rank_host()};
  h->cfg_ = cfg;
  h->segment_name_ = segment_name_for(cfg.pool, cfg.topology);
  if (cfg.observe.trace != trace::trace_level::off) {
    auto t = trace::tracer::open(cfg.observe.trace, cfg.observe.trace_dir, "worker",
                                 channel::peer_id(cfg.rank, cfg.incarnation), cfg.topology.node);
    if (!t) return t.error();
    h->tracer_ = std::move(t).value();
  }
  if (cfg.mode == connection_mode::in_process) {
    if (!local->host || !local->scheduler || !local->transport) {
      return make_error(errc::io_error, "embed: the scheduler connector is shut down");
    }
    h->host_ = local->host;
    h->scheduler_ = local->scheduler;
    h->local_transport_ = local->transport;
  } else if (cfg.network.port != 0 && !cfg.pool.create_or_attach) {
    // In connect mode with a fixed port the scheduler's process created the pool before it
    // started listening: reach it first. A rank that may create the pool (an engine that
    // builds its workers first, across nodes: vLLM) reaches it in connect_published instead.
    if (auto st = h->connect(cfg.network.port); !st) return st;
  }
  auto engine = cfg.make_copy_engine
                    ? cfg.make_copy_engine()
                    : cuda::make_copy_engine({.backend = cfg.backend, .device = cfg.device});
  if (!engine) return engine.error();
  if (!*engine) return make_error(errc::invalid_argument, "embed: make_copy_engine returned null");
  h->engine_ = std::move(engine).value();
  if (fault_plan plan = copy_fault_plan(cfg.faults, cfg.rank); !plan.empty()) {
    auto faulty = cuda::faulty_copy_engine::make(std::move(h->engine_), std::move(plan));
    if (!faulty) return faulty.error();
    h->faulty_ = faulty->get();
    h->engine_ = std::move(faulty).value();
  }
  const shm::pool_geometry geometry{cfg.topology.world_size(), cfg.pool.slots_per_rank,
                                    cfg.pool.slot_bytes};
  auto seg = open_node_pool(h->segment_name_, geometry, cfg.pool, pool_side::worker,
                            std::chrono::steady_clock::now() + cfg.join_timeout);
  if (!seg) return seg.error();
  h->segment_.emplace(std::move(seg).value());
  if (cfg.pool.prefault) {
    // The region's pages go next to the GPU before they are faulted in (cuda backend only; the
    // others know no node). A refusal costs bandwidth, not correctness: warn and go on.
    if (const int node = h->engine_->numa_node(); node >= 0) {
      if (auto st = h->segment_->prefer_numa_node(cfg.rank, node); !st) {
        spdlog::warn("embed: rank {}: pool region not placed on NUMA node {}: {}", cfg.rank, node,
                     st.message());
      }
    }
    if (auto st = h->segment_->prefault_rank(cfg.rank); !st) return st;
  }
  return h;
}

rank_host::~rank_host() {
  channel_.reset();
  // The scheduler sees the rank leave (unless its stop already ended the actor).
  uint8_t live = 0;
  if (rank_actor_ && ending_->compare_exchange_strong(live, local_reason)) {
    end_companion(rank_actor_, caf::exit_reason::normal);
  }
  rank_actor_ = nullptr;
  scheduler_ = nullptr;
  host_.reset();
  tunnel_.reset();  // after the actor system: CAF's connection ran through it
}

status rank_host::connect(uint16_t port) {
  const std::string& host = cfg_.network.host;
  const std::string where = host + ":" + std::to_string(port);
  // CAF's connect has no limit of its own: find out first whether anything answers.
  if (auto st = control::probe_tcp(host, port, cfg_.register_timeout); !st) {
    return make_error(st.code(), "embed: cannot reach the scheduler at " + st.message());
  }
  // The scheduler's port is its gate: CAF connects through a tunnel that presents the token
  // first (control/gate.hpp).
  auto tunnel = control::gate_tunnel::open(host, port, cfg_.token, cfg_.register_timeout);
  if (!tunnel) return tunnel.error();
  tunnel_ = std::move(tunnel).value();
  host_ = actor_host::start(cfg_.network, /*network=*/true);
  auto s = caf::io::remote_actor<control::scheduler_actor>(host_->system(), "127.0.0.1",
                                                           tunnel_->local_port());
  if (!s && tunnel_->refused()) {
    return make_error(errc::protocol_mismatch, "embed: the scheduler at " + where +
                                                   " refused this worker at its gate: wrong "
                                                   "token");
  }
  if (!s) {
    return make_error(errc::io_error, "embed: cannot reach the scheduler at " + where + ": " +
                                          host_->system().render(s.error()));
  }
  scheduler_ = std::move(s).value();
  return {};
}

status rank_host::connect_published(std::chrono::steady_clock::time_point deadline,
                                    const std::atomic<bool>& cancelled) {
  if (scheduler_) return {};
  const uint16_t fixed = cfg_.network.port;
  for (;;) {
    if (fixed != 0) {
      // A fixed port (a rank on another node than its scheduler side): reach it once
      // something answers there; a refusal at its gate is not waited out.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      const auto probe = std::clamp(left, std::chrono::milliseconds{1}, cfg_.register_timeout);
      if (control::probe_tcp(cfg_.network.host, fixed, probe)) return connect(fixed);
    } else if (const uint16_t port = segment_->scheduler_port(); port != 0) {
      return connect(port);
    }
    if (cancelled.load()) {
      return make_error(errc::io_error, "embed: rank " + std::to_string(cfg_.rank) +
                                            " was closed while waiting for its scheduler");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      const std::string what =
          fixed != 0 ? "no scheduler side answered at " + cfg_.network.host + ":" +
                           std::to_string(fixed)
                     : "no scheduler side published its port in segment " + segment_name_;
      return make_error(errc::timeout, "embed: rank " + std::to_string(cfg_.rank) + ": " + what +
                                           " within " +
                                           std::to_string(cfg_.join_timeout.count()) +
                                           " ms (runtime.ready_timeout_ms)");
    }
    std::this_thread::sleep_for(publish_slice);
  }
}

worker::cpu_pool_region rank_host::region() const noexcept {
  const auto r = segment_->rank_region(cfg_.rank);
  return {r.data(), segment_->geometry().slot_stride(), cfg_.pool.slots_per_rank};
}

status rank_host::register_rank() {
  if (!scheduler_) {
    return make_error(errc::precondition_failed,
                      "embed: rank " + std::to_string(cfg_.rank) + " has no scheduler to join");
  }
  const scheduler::handshake_expectation want{.topology = cfg_.topology,
                                              .segment = segment_name_,
                                              .layout_checksum = segment_->layout_checksum(),
                                              .token = cfg_.token};
  const worker_registration reg =
      scheduler::make_registration(want, cfg_.rank, cfg_.incarnation, ::getpid());
  caf::actor_system& sys = host_->system();
  rank_actor_ = make_rank_actor(sys, ending_, tracer_, cfg_.rank, cfg_.incarnation);
  if (tracer_) {
    trace::trace_record r;
    r.dir = trace::direction::send;
    r.track = trace::rank_track(cfg_.rank);
    r.type = "registration";
    r.rank = cfg_.rank;
    r.msg = trace::message_id("registration", -1, channel::peer_id(cfg_.rank, cfg_.incarnation));
    tracer_->emit(std::move(r));
  }
  as_companion(rank_actor_)->monitor(scheduler_);
  status outcome;
  std::string endpoint;
  {
    caf::scoped_actor self{sys};
    self->request(scheduler_, cfg_.register_timeout, control::hello_atom::value, reg,
                  caf::actor_cast<control::worker_actor>(rank_actor_))
        .receive([&](control::coordinator_actor&, std::string& ep) { endpoint = std::move(ep); },
                 [&](caf::error& e) { outcome = control::to_status(e); });
  }
  if (!outcome) return outcome;
  if (!local_transport_ && endpoint.empty()) {
    return make_error(errc::protocol_mismatch,
                      "embed: the scheduler serves workers of its own process only (no listen)");
  }
  const std::string peer = channel::peer_id(cfg_.rank, cfg_.incarnation);
  auto transport = local_transport_ ? local_transport_->connect_local(peer)
                                    : channel::zmq_connect(endpoint, peer, cfg_.token);
  if (!transport) return transport.error();
  std::unique_ptr<channel::client_transport> conn = std::move(transport).value();
  if (tracer_) {
    conn = std::make_unique<trace::traced_client_transport>(std::move(conn), tracer_, peer,
                                                            trace::rank_track(cfg_.rank));
  }
  auto ch = channel::rank_channel::open(std::move(conn), {cfg_.rank, cfg_.incarnation, cfg_.token});
  if (!ch) return ch.error();
  channel_ = std::move(ch).value();
  return {};
}

fault_counts rank_host::injected_faults() const noexcept {
  fault_counts counts{};
  if (!faulty_) return counts;
  const fault_plan& plan = faulty_->injector().plan();
  for (size_t i = 0; i < plan.rules.size(); ++i) {
    const fault_action a = plan.rules[i].action;
    const fault_kind kind = a == fault_action::delay         ? fault_kind::delay_copy
                            : a == fault_action::lose_device ? fault_kind::lose_device
                                                             : fault_kind::fail_copy;
    counts[static_cast<size_t>(kind)] += faulty_->injector().fired(i);
  }
  return counts;
}

}  // namespace kvc::embed
