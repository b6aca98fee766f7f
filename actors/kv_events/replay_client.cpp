#include "actors/kv_events/replay_client.hpp"

#include <vector>

#include "actors/kv_events/batch_encoder.hpp"

namespace kvc::kv_events {

namespace {

/// The frames of one message that poll() said is there.
std::vector<zmq::message_t> recv_message(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  zmq::message_t m;
  do {
    if (!s.recv(m, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(m));
    m = zmq::message_t{};
  } while (frames.back().more());
  return frames;
}

uint64_t be64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* b = static_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | b[i];
  return v;
}

}  // namespace

result<replay_outcome> fetch_replay(
    zmq::context_t& ctx, const replay_request& r,
    const std::function<void(uint64_t seq, std::string_view payload)>& on_batch) {
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  try {
    dealer.connect(r.endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(errc::io_error, "replay: cannot connect to " + r.endpoint + ": " + e.what());
  }
  dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(sequence_bytes(r.from)), zmq::send_flags::none);
  const std::string end = end_of_replay();
  uint64_t received = 0;
  for (;;) {
    zmq::pollitem_t items[2] = {{dealer.handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, r.stop_fd, ZMQ_POLLIN, 0}};
    const int n = zmq::poll(items, r.stop_fd >= 0 ? 2 : 1, r.timeout);
    if (r.stop_fd >= 0 && (items[1].revents & ZMQ_POLLIN)) return replay_outcome::stopped;
    if (n == 0) {
      return make_error(errc::timeout, "replay: " + r.endpoint + " sent no message for " +
                                           std::to_string(r.timeout.count()) + " ms after " +
                                           std::to_string(received) + " batches (no end marker)");
    }
    auto f = recv_message(dealer);
    if (f.size() != 3 || f[0].size() != 0 || f[1].size() != 8) {
      return make_error(errc::invalid_argument, "replay: " + r.endpoint + " sent a message of " +
                                                    std::to_string(f.size()) +
                                                    " frames that is not [empty, seq, payload]");
    }
    if (f[1].to_string_view() == end) return replay_outcome::complete;
    ++received;
    on_batch(be64(f[1]), f[2].to_string_view());
  }
}

}  // namespace kvc::kv_events
