#include "actors/channel/scheduler_channel.hpp"

#include <optional>
#include <utility>

namespace kvc::channel {

result<std::unique_ptr<scheduler_channel>> scheduler_channel::create(
    std::unique_ptr<server_transport> transport, uint32_t world_size, std::string token) {
  if (!transport || world_size == 0) {
    return make_error(errc::invalid_argument, "step channel: a transport and a world of >= 1");
  }
  return std::unique_ptr<scheduler_channel>{
      new scheduler_channel(std::move(transport), world_size, std::move(token))};
}

scheduler_channel::scheduler_channel(std::unique_ptr<server_transport> transport,
                                     uint32_t world_size, std::string token)
    : transport_(std::move(transport)),
      token_(std::move(token)),
      routes_(world_size),
      live_(world_size) {}

void scheduler_channel::drop(std::string note) {
  ++dropped_;
  notes_.push_back(std::move(note));
}

void scheduler_channel::rank_up(rank_id rank, uint32_t incarnation) {
  if (rank >= live_.size()) return;  // the registry admits no such rank
  live_[rank] = incarnation;
  route& r = routes_[rank];
  r.backlog.clear();  // a new registration: older steps were the previous incarnation's
  // A hello that came before its rank_up is routed now; an older incarnation's route goes.
  r.routed = !r.peer.empty() && r.incarnation == incarnation;
  if (!r.routed && r.incarnation < incarnation) r.peer.clear();
  flush(rank);
}

void scheduler_channel::rank_down(rank_id rank) {
  if (rank >= live_.size()) return;
  live_[rank].reset();
  routes_[rank] = route{};  // its backlog goes too: the rank's jobs failed
}

void scheduler_channel::send_step(const connector_metadata& meta) {
  // Encoded once, and only when a rank gets the bytes: with no rank registered (a replay with
  // no workers) a step costs no encoding.
  std::optional<wire_bytes> encoded;
  auto bytes = [&]() -> const wire_bytes& {
    if (!encoded) encoded = encode(meta);
    return *encoded;
  };
  for (rank_id rank = 0; rank < routes_.size(); ++rank) {
    route& r = routes_[rank];
    if (r.routed) {
      send_to(rank, meta.step, bytes());
    } else if (live_[rank] && r.backlog.size() < max_backlog) {
      r.backlog.emplace_back(meta.step, bytes());  // registered, hello on its way
    } else if (live_[rank]) {
      drop("step channel: step " + std::to_string(meta.step) + " not queued for rank " +
           std::to_string(rank) + ": it never said hello");
    }
  }
}

void scheduler_channel::send_to(rank_id rank, step_id step, const wire_bytes& bytes) {
  if (auto st = transport_->send(routes_[rank].peer, bytes); !st) {
    drop("step channel: step " + std::to_string(step) + " not sent to rank " +
         std::to_string(rank) + ": " + st.to_string());
  }
}

void scheduler_channel::flush(rank_id rank) {
  route& r = routes_[rank];
  if (!r.routed) return;
  for (const auto& [step, bytes] : r.backlog) send_to(rank, step, bytes);
  r.backlog.clear();
}

size_t scheduler_channel::receive(std::chrono::milliseconds timeout,
                                  std::vector<step_report>& reports) {
  size_t handled = 0;
  for (auto wait = timeout;; wait = std::chrono::milliseconds::zero()) {
    auto frame = transport_->receive(wait);
    if (!frame) {  // a malformed envelope (dropped) or a socket error: stop here
      drop(frame.error().to_string());
      return handled;
    }
    if (!*frame) return handled;
    handle(**frame, reports);
    ++handled;
  }
}

size_t scheduler_channel::queued_steps() const noexcept {
  size_t n = 0;
  for (const route& r : routes_) n += r.backlog.size();
  return n;
}

uint32_t scheduler_channel::routed_ranks() const noexcept {
  uint32_t n = 0;
  for (const route& r : routes_) n += r.routed ? 1 : 0;
  return n;
}

void scheduler_channel::handle(inbound_frame& frame, std::vector<step_report>& reports) {
  auto kind = kind_of(frame.bytes);
  status st;
  if (kind && *kind == wire_kind::hello) {
    auto h = decode_hello(frame.bytes);
    if (h) on_hello(frame.peer, *h);
    if (!h) st = h.error();
  } else if (kind && *kind == wire_kind::report) {
    auto r = decode_report(frame.bytes);
    if (r && accepts(frame.peer, *r)) reports.push_back(std::move(r).value());
    if (!r) st = r.error();
  } else {
    st = kind ? make_error(errc::protocol_mismatch, "step channel: a rank sent metadata")
              : kind.error();
  }
  if (!st) drop(st.to_string() + " (from peer '" + frame.peer + "')");
}

void scheduler_channel::on_hello(const std::string& peer, const wire_hello& h) {
  if (h.token != token_) {
    drop("step channel: hello from peer '" + peer + "' refused: wrong token");
    return;
  }
  if (h.rank >= routes_.size()) {
    drop("step channel: hello from rank " + std::to_string(h.rank) + " outside the world of " +
         std::to_string(routes_.size()));
    return;
  }
  if (live_[h.rank] && h.incarnation < *live_[h.rank]) {
    drop("step channel: hello from rank " + std::to_string(h.rank) + " incarnation " +
         std::to_string(h.incarnation) + ": stale (live: " + std::to_string(*live_[h.rank]) + ")");
    return;
  }
  route& r = routes_[h.rank];
  r.peer = peer;
  r.incarnation = h.incarnation;
  r.routed = live_[h.rank] && *live_[h.rank] == h.incarnation;
  flush(h.rank);
}

bool scheduler_channel::accepts(const std::string& peer, const step_report& rep) {
  const bool ok = rep.rank < routes_.size() && routes_[rep.rank].routed &&
                  routes_[rep.rank].peer == peer &&
                  routes_[rep.rank].incarnation == rep.incarnation;
  if (!ok) {
    drop("step channel: dropped step " + std::to_string(rep.step) + " report of rank " +
         std::to_string(rep.rank) + " incarnation " + std::to_string(rep.incarnation) +
         " from peer '" + peer + "': not the rank's routed connection");
  }
  return ok;
}

}  // namespace kvc::channel
