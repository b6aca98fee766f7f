#include "actors/embed/engine_data_plane.hpp"

#include <utility>

#include <spdlog/spdlog.h>

namespace kvc::embed {

result<std::unique_ptr<engine_data_plane>> engine_data_plane::create(
    uint32_t world_size, std::chrono::nanoseconds job_timeout, const std::string& tcp_host,
    std::string token) {
  auto core = coordinator::step_coordinator::create({.world_size = world_size}, job_timeout);
  if (!core) return core.error();
  auto server = runtime::data_plane_server::create(tcp_host);
  if (!server) return server.error();
  return std::unique_ptr<engine_data_plane>{
      new engine_data_plane(std::move(core).value(), std::move(server).value(), world_size,
                            std::move(token))};
}

engine_data_plane::engine_data_plane(coordinator::step_coordinator core,
                                     std::unique_ptr<runtime::data_plane_server> server,
                                     uint32_t world_size, std::string token)
    : core_(std::move(core)),
      server_(std::move(server)),
      token_(std::move(token)),
      routes_(world_size),
      live_(world_size) {}

void engine_data_plane::rank_up(rank_id rank, uint32_t incarnation) {
  core_.rank_up(rank, incarnation);
  if (rank >= live_.size()) return;  // the coordinator logged it
  live_[rank] = incarnation;
  route& r = routes_[rank];
  r.backlog.clear();  // a new registration: older steps were the previous incarnation's
  // A hello that came before its rank_up is routed now; an older incarnation's route goes.
  r.routed = !r.peer.empty() && r.incarnation == incarnation;
  if (!r.routed && r.incarnation < incarnation) r.peer.clear();
  flush(rank);
}

void engine_data_plane::rank_down(rank_id rank) {
  core_.rank_down(rank);
  if (rank >= live_.size()) return;
  live_[rank].reset();
  routes_[rank] = route{};  // its backlog goes too: the rank's jobs failed
}

void engine_data_plane::send_step(const connector_metadata& meta, uint64_t now) {
  core_.expect(meta, now);
  const runtime::wire_bytes bytes = runtime::encode(meta);
  for (rank_id rank = 0; rank < routes_.size(); ++rank) {
    route& r = routes_[rank];
    if (r.routed) {
      send_to(rank, meta.step, bytes);
    } else if (live_[rank] && r.backlog.size() < max_backlog) {
      r.backlog.emplace_back(meta.step, bytes);  // registered, hello on its way
    } else if (live_[rank]) {
      ++dropped_;
      spdlog::warn("data plane: step {} not queued for rank {}: it never said hello", meta.step,
                   rank);
    }
  }
}

void engine_data_plane::send_to(rank_id rank, step_id step, const runtime::wire_bytes& bytes) {
  if (auto st = server_->send(routes_[rank].peer, bytes); !st) {
    ++dropped_;
    spdlog::warn("data plane: step {} not sent to rank {}: {}", step, rank, st.to_string());
  }
}

void engine_data_plane::flush(rank_id rank) {
  route& r = routes_[rank];
  if (!r.routed) return;
  for (const auto& [step, bytes] : r.backlog) send_to(rank, step, bytes);
  r.backlog.clear();
}

size_t engine_data_plane::pump(std::chrono::milliseconds timeout) {
  size_t handled = 0;
  for (auto wait = timeout;; wait = std::chrono::milliseconds::zero()) {
    auto frame = server_->receive(wait);
    if (!frame) {  // a malformed envelope (dropped) or a socket error: stop here
      ++dropped_;
      spdlog::warn("{}", frame.error().to_string());
      return handled;
    }
    if (!*frame) return handled;
    handle(**frame);
    ++handled;
  }
}

void engine_data_plane::tick(uint64_t now) {
  core_.tick(now);
}

uint32_t engine_data_plane::routed_ranks() const noexcept {
  uint32_t n = 0;
  for (const route& r : routes_) n += r.routed ? 1 : 0;
  return n;
}

void engine_data_plane::handle(runtime::inbound_frame& frame) {
  auto kind = runtime::kind_of(frame.bytes);
  status st;
  if (kind && *kind == runtime::wire_kind::hello) {
    auto h = runtime::decode_hello(frame.bytes);
    if (h) on_hello(frame.peer, *h);
    if (!h) st = h.error();
  } else if (kind && *kind == runtime::wire_kind::report) {
    auto r = runtime::decode_report(frame.bytes);
    if (r) on_report(frame.peer, *r);
    if (!r) st = r.error();
  } else {
    st = kind ? make_error(errc::protocol_mismatch, "data plane: a worker sent metadata")
              : kind.error();
  }
  if (!st) {
    ++dropped_;
    spdlog::warn("{} (from peer '{}')", st.to_string(), frame.peer);
  }
}

void engine_data_plane::on_hello(const std::string& peer, const runtime::wire_hello& h) {
  if (h.token != token_) {
    ++dropped_;
    spdlog::warn("data plane: hello from peer '{}' (rank {}) refused: wrong token", peer, h.rank);
    return;
  }
  if (h.rank >= routes_.size()) {
    ++dropped_;
    spdlog::warn("data plane: hello from rank {} outside the world of {}", h.rank, routes_.size());
    return;
  }
  route& r = routes_[h.rank];
  if (live_[h.rank] && h.incarnation < *live_[h.rank]) {
    ++dropped_;
    spdlog::warn("data plane: hello from rank {} incarnation {}: stale (live: {})", h.rank,
                 h.incarnation, *live_[h.rank]);
    return;
  }
  const bool routed = live_[h.rank] && *live_[h.rank] == h.incarnation;
  r.peer = peer;
  r.incarnation = h.incarnation;
  r.routed = routed;
  flush(h.rank);
}

void engine_data_plane::on_report(const std::string& peer, const runtime::step_report& rep) {
  if (rep.rank >= routes_.size() || !routes_[rep.rank].routed ||
      routes_[rep.rank].peer != peer || routes_[rep.rank].incarnation != rep.incarnation) {
    ++dropped_;
    spdlog::warn("data plane: dropped step {} report of rank {} incarnation {} from peer '{}': "
                 "not the rank's routed connection",
                 rep.step, rep.rank, rep.incarnation, peer);
    return;
  }
  core_.report(rep.rank, rep.incarnation, rep.step, rep.events);
}

}  // namespace kvc::embed
