#include "actors/trace/traced_transport.hpp"

#include <charconv>
#include <utility>

namespace kvc::trace {

namespace {

std::string_view type_name(channel::wire_kind k) noexcept {
  switch (k) {
    case channel::wire_kind::hello:
      return "hello";
    case channel::wire_kind::metadata:
      return "metadata";
    case channel::wire_kind::report:
      return "report";
  }
  return "malformed";
}

/// The record of one frame; `peer` is the rank's routing id on either end.
trace_record frame_record(direction dir, std::span<const char> bytes, std::string_view peer,
                          std::string track) {
  trace_record r;
  r.dir = dir;
  r.track = std::move(track);
  r.bytes = bytes.size();
  r.rank = rank_of_peer(peer);
  auto s = channel::summarize(bytes);
  if (!s) {
    r.type = "malformed";
    return r;
  }
  r.type = type_name(s->kind);
  if (s->kind != channel::wire_kind::hello) r.step = static_cast<int64_t>(s->step);
  r.incarnation = incarnation_of_peer(peer);
  // The id is built from rank and incarnation when the line is written; a peer id of another
  // shape gets it now.
  if (r.rank < 0 || r.incarnation < 0) r.msg = message_id(r.type, r.step, peer);
  return r;
}

}  // namespace

int64_t rank_of_peer(std::string_view peer) noexcept {
  if (peer.size() < 2 || peer[0] != 'r') return -1;
  int64_t rank = -1;
  const char* end = peer.data() + peer.size();
  auto [p, ec] = std::from_chars(peer.data() + 1, end, rank);
  if (ec != std::errc{} || p == end || *p != '.') return -1;
  return rank;
}

int64_t incarnation_of_peer(std::string_view peer) noexcept {
  if (rank_of_peer(peer) < 0) return -1;
  const size_t dot = peer.find('.');
  int64_t inc = -1;
  const char* end = peer.data() + peer.size();
  auto [p, ec] = std::from_chars(peer.data() + dot + 1, end, inc);
  if (ec != std::errc{} || p != end) return -1;
  return inc;
}

std::string rank_track(int64_t rank) {
  return "rank " + std::to_string(rank);
}

namespace {
constexpr std::string_view tier_track_prefix = "tier ";
}  // namespace

std::string tier_track(transfer_kind kind) {
  return std::string{tier_track_prefix} + std::string{to_string(kind)};
}

bool is_tier_track(std::string_view track) noexcept {
  return track.starts_with(tier_track_prefix);
}

traced_server_transport::traced_server_transport(std::unique_ptr<channel::server_transport> inner,
                                                 std::shared_ptr<tracer> t)
    : inner_(std::move(inner)), tracer_(std::move(t)) {}

const std::string& traced_server_transport::remote_endpoint() const noexcept {
  return inner_->remote_endpoint();
}

result<std::unique_ptr<channel::client_transport>> traced_server_transport::connect_local(
    const std::string& peer) {
  return inner_->connect_local(peer);
}

status traced_server_transport::send(std::string_view peer, std::span<const char> bytes) {
  trace_record r = frame_record(direction::send, bytes, peer, "scheduler");
  r.mono_ns = tracer::mono_now();
  status st = inner_->send(peer, bytes);
  if (!st) r.note = st.to_string();
  tracer_->emit(std::move(r));
  return st;
}

result<std::optional<channel::inbound_frame>> traced_server_transport::receive(
    std::chrono::milliseconds timeout) {
  auto f = inner_->receive(timeout);
  if (f && *f) {
    tracer_->emit(frame_record(direction::receive, (*f)->bytes, (*f)->peer, "scheduler"));
  }
  return f;
}

traced_client_transport::traced_client_transport(std::unique_ptr<channel::client_transport> inner,
                                                 std::shared_ptr<tracer> t, std::string peer,
                                                 std::string track)
    : inner_(std::move(inner)),
      tracer_(std::move(t)),
      peer_(std::move(peer)),
      track_(std::move(track)) {}

status traced_client_transport::send(std::span<const char> bytes) {
  trace_record r = frame_record(direction::send, bytes, peer_, track_);
  r.mono_ns = tracer::mono_now();
  status st = inner_->send(bytes);
  if (!st) r.note = st.to_string();
  tracer_->emit(std::move(r));
  return st;
}

result<std::optional<channel::wire_bytes>> traced_client_transport::receive(
    std::chrono::milliseconds timeout) {
  auto f = inner_->receive(timeout);
  if (f && *f) tracer_->emit(frame_record(direction::receive, **f, peer_, track_));
  return f;
}

}  // namespace kvc::trace
