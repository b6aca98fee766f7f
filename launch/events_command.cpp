// `kvconnect events tail ENDPOINT`: subscribes to a KV-event stream in vLLM's wire format (ours
// or vLLM's own) and prints one JSON line per batch: {"topic", "seq", "ts",
// "data_parallel_rank", "events": [...]} (kv_events/batch_decoder.hpp). A jump in the sequence
// numbers is reported on stderr; with --replay ENDPOINT the missed batches are fetched from the
// publisher's replay socket and printed first, in order. Ends after --count batches, or at
// SIGINT / SIGTERM.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "actors/kv_events/batch_decoder.hpp"
#include "launch/commands.hpp"
#include "launch/signal_watcher.hpp"

namespace kvc::launch {

namespace {

struct tail_options {
  std::string endpoint;
  std::string replay;
  std::string topic;
  uint64_t count = 0;  // 0: until a signal
};

uint64_t be64(const zmq::message_t& m) {
  uint64_t v = 0;
  const auto* b = static_cast<const unsigned char*>(m.data());
  for (size_t i = 0; i < m.size() && i < 8; ++i) v = (v << 8) | b[i];
  return v;
}

std::vector<zmq::message_t> recv_frames(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  zmq::message_t m;
  do {
    if (!s.recv(m, zmq::recv_flags::none)) break;
    frames.push_back(std::move(m));
    m = zmq::message_t{};
  } while (frames.back().more());
  return frames;
}

/// Prints one batch; false (and a line on stderr) when it does not decode.
bool print(const std::string& topic, uint64_t seq, const zmq::message_t& payload) {
  auto j = kv_events::decode_batch(payload.to_string_view());
  if (!j) {
    std::cerr << "kvconnect events tail: batch " << seq << ": " << j.error().message() << "\n";
    return false;
  }
  nlohmann::json line = {{"topic", topic}, {"seq", seq}};
  line.update(*j);
  std::cout << line.dump() << std::endl;
  return true;
}

/// The batches [from, to) from the replay socket; how many were printed.
uint64_t fill_gap(zmq::context_t& ctx, const tail_options& o, const std::string& topic,
                  uint64_t from, uint64_t to) {
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(o.replay);
  std::string start(8, '\0');
  for (int i = 0; i < 8; ++i) start[i] = static_cast<char>(from >> (56 - 8 * i));
  dealer.send(zmq::message_t{}, zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start), zmq::send_flags::none);
  uint64_t printed = 0;
  for (;;) {
    auto f = recv_frames(dealer);
    if (f.size() != 3 || f[1].size() != 8) {
      std::cerr << "kvconnect events tail: malformed replay answer\n";
      return printed;
    }
    if (f[1].to_string() == std::string(8, '\xff')) return printed;  // end marker
    const uint64_t seq = be64(f[1]);
    if (seq < to && print(topic, seq, f[2])) ++printed;
  }
}

int tail(const tail_options& o) {
  signal_watcher signals;
  zmq::context_t ctx{1};
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  try {
    sub.set(zmq::sockopt::subscribe, o.topic);
    sub.connect(o.endpoint);
  } catch (const zmq::error_t& e) {
    std::cerr << "kvconnect events tail: cannot connect to " << o.endpoint << ": " << e.what()
              << "\n";
    return 2;
  }
  std::optional<uint64_t> next;
  uint64_t printed = 0;
  while (!signals.signalled() && (o.count == 0 || printed < o.count)) {
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds{100}) == 0) continue;
    auto f = recv_frames(sub);
    if (f.size() != 3 || f[1].size() != 8) {
      std::cerr << "kvconnect events tail: a message of " << f.size()
                << " frames is not a KV-event batch\n";
      continue;
    }
    const std::string topic = f[0].to_string();
    const uint64_t seq = be64(f[1]);
    if (next && seq > *next) {
      std::cerr << "kvconnect events tail: missed batches " << *next << ".." << seq - 1 << "\n";
      if (!o.replay.empty()) printed += fill_gap(ctx, o, topic, *next, seq);
    }
    next = seq + 1;
    if (print(topic, seq, f[2])) ++printed;
  }
  return 0;
}

}  // namespace

void add_events_command(CLI::App& app, int& exit_code) {
  auto* events = app.add_subcommand("events", "KV events in vLLM's wire format");
  events->require_subcommand(1);
  auto o = std::make_shared<tail_options>();
  auto* cmd = events->add_subcommand(
      "tail", "Subscribe to a KV-event stream and print each batch as a JSON line");
  cmd->add_option("ENDPOINT", o->endpoint, "The publisher's PUB endpoint, e.g. tcp://host:5557")
      ->required();
  cmd->add_option("--replay", o->replay,
                  "The publisher's replay (ROUTER) endpoint: fetch missed batches from it");
  cmd->add_option("--topic", o->topic, "Only batches whose topic starts with this");
  cmd->add_option("--count", o->count, "Stop after this many batches (0: at SIGINT/SIGTERM)")
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = tail(*o); });
}

}  // namespace kvc::launch
