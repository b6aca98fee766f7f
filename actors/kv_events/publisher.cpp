#include "actors/kv_events/publisher.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "actors/kv_events/batch_encoder.hpp"

namespace kvc::kv_events {

namespace {

/// The publishing thread's state: the sockets and the replay buffer.
struct loop_state {
  zmq::socket_t pull;
  zmq::socket_t pub;
  zmq::socket_t router;  // absent (no handle) without replay
  std::string topic;
  size_t buffer = 0;
  std::deque<std::pair<uint64_t, std::string>> kept;
  uint64_t next_seq = 0;
  std::shared_ptr<std::atomic<uint64_t>> published;

  void send_batch(std::string payload) {
    const std::string seq = sequence_bytes(next_seq);
    pub.send(zmq::buffer(topic), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(seq), zmq::send_flags::sndmore);
    pub.send(zmq::buffer(payload), zmq::send_flags::none);
    if (kept.size() == buffer) kept.pop_front();
    kept.emplace_back(next_seq, std::move(payload));
    ++next_seq;
    published->fetch_add(1, std::memory_order_relaxed);
  }

  void answer_replay() {
    std::vector<zmq::message_t> frames;
    zmq::message_t m;
    do {
      if (!router.recv(m, zmq::recv_flags::none)) return;
      frames.push_back(std::move(m));
      m = zmq::message_t{};
    } while (frames.back().more());
    // [identity, empty, start seq]; a REQ adds nothing more, a DEALER sends the empty itself.
    const bool well_formed = frames.size() == 3 && frames[1].size() == 0 && frames[2].size() == 8;
    uint64_t start = UINT64_MAX;
    if (well_formed) {
      const auto* b = static_cast<const unsigned char*>(frames[2].data());
      start = 0;
      for (int i = 0; i < 8; ++i) start = (start << 8) | b[i];
    } else {
      spdlog::warn("kv events: malformed replay request ({} frames); answered with the end marker",
                   frames.size());
    }
    const std::string identity(static_cast<const char*>(frames[0].data()), frames[0].size());
    size_t sent = 0;
    size_t due = 1;  // the end marker
    bool complete = true;
    // ROUTER_MANDATORY: a reply that does not fit the peer's queue fails instead of vanishing;
    // dontwait: a peer that reads nothing never stalls the PUB socket.
    auto reply = [&](std::string_view seq, std::string_view payload) {
      if (!complete) return;
      try {
        if (!router.send(zmq::buffer(identity),
                         zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
          complete = false;  // EAGAIN: the peer's queue is full
          return;
        }
        router.send(zmq::message_t{}, zmq::send_flags::sndmore);
        router.send(zmq::buffer(seq), zmq::send_flags::sndmore);
        router.send(zmq::buffer(payload), zmq::send_flags::none);
        ++sent;
      } catch (const zmq::error_t&) {  // EHOSTUNREACH: the peer went away
        complete = false;
      }
    };
    if (well_formed) {
      for (const auto& [seq, payload] : kept) {
        if (seq < start) continue;
        ++due;
        reply(sequence_bytes(seq), payload);
      }
    }
    reply(end_of_replay(), {});
    if (!complete) {
      spdlog::warn(
          "kv events: replay answer cut after {} of {} messages: the peer is gone or has not "
          "read an earlier answer",
          sent, due);
    }
  }

  void run() {
    std::vector<zmq::pollitem_t> items{{pull.handle(), 0, ZMQ_POLLIN, 0}};
    if (router) items.push_back({router.handle(), 0, ZMQ_POLLIN, 0});
    for (;;) {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds{-1});
      if (items[0].revents & ZMQ_POLLIN) {
        // Everything handed over so far, before a replay request is answered: a batch published
        // before the request was sent is in the answer.
        zmq::message_t m;
        while (pull.recv(m, zmq::recv_flags::dontwait)) {
          if (m.size() == 0) return;  // the owner's stop
          send_batch(m.to_string());
        }
      }
      if (items.size() > 1 && (items[1].revents & ZMQ_POLLIN)) answer_replay();
    }
  }
};

std::string last_endpoint(zmq::socket_t& s) {
  return s.get(zmq::sockopt::last_endpoint);
}

}  // namespace

result<std::unique_ptr<publisher>> publisher::start(const publisher_options& o) {
  if (o.buffer == 0) return make_error(errc::invalid_argument, "kv events: buffer must be >= 1");
  if (o.endpoint.empty()) return make_error(errc::invalid_argument, "kv events: no endpoint");
  std::unique_ptr<publisher> p{new publisher()};
  auto st = std::make_unique<loop_state>();
  st->topic = o.topic;
  st->buffer = o.buffer;
  st->published = p->published_;
  const std::string inproc = "inproc://kvc-kv-events";
  try {
    st->pull = zmq::socket_t(p->ctx_, zmq::socket_type::pull);
    st->pull.bind(inproc);
    p->push_ = zmq::socket_t(p->ctx_, zmq::socket_type::push);
    p->push_.connect(inproc);
    st->pub = zmq::socket_t(p->ctx_, zmq::socket_type::pub);
    st->pub.set(zmq::sockopt::sndhwm, o.high_water_mark);
    // The last batches (AllBlocksCleared at shutdown) still reach connected subscribers;
    // a stuck one delays the close by at most this.
    st->pub.set(zmq::sockopt::linger, 1000);
    st->pub.bind(o.endpoint);
    p->endpoint_ = last_endpoint(st->pub);
  } catch (const zmq::error_t& e) {
    return make_error(errc::io_error,
                      "kv events: cannot bind " + o.endpoint + ": " + std::string{e.what()});
  }
  if (!o.replay_endpoint.empty()) {
    try {
      st->router = zmq::socket_t(p->ctx_, zmq::socket_type::router);
      st->router.set(zmq::sockopt::linger, 0);
      // One whole answer (every kept batch and the end marker) fits a peer's queue; ZeroMQ's
      // default (1,000) silently dropped the rest of a longer one.
      st->router.set(zmq::sockopt::sndhwm, static_cast<int>(std::min<size_t>(
                                               o.buffer + 1, std::numeric_limits<int>::max())));
      st->router.set(zmq::sockopt::router_mandatory, true);
      st->router.bind(o.replay_endpoint);
      p->replay_endpoint_ = last_endpoint(st->router);
    } catch (const zmq::error_t& e) {
      return make_error(errc::io_error, "kv events: cannot bind the replay endpoint " +
                                            o.replay_endpoint + ": " + std::string{e.what()});
    }
  }
  p->thread_ = std::thread([s = std::move(st)] { s->run(); });
  return p;
}

void publisher::publish(std::string payload) {
  if (payload.empty()) return;
  push_.send(zmq::buffer(payload), zmq::send_flags::none);
}

publisher::~publisher() {
  if (thread_.joinable()) {
    push_.send(zmq::message_t{}, zmq::send_flags::none);  // stop, after what was handed over
    thread_.join();
  }
  push_.close();
}

}  // namespace kvc::kv_events
