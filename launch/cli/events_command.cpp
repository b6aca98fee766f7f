// `kvconnect events tail ENDPOINT`: subscribes to a KV-event stream in vLLM's wire format (ours
// or vLLM's own) and prints one JSON line per batch: {"topic", "seq", "ts",
// "data_parallel_rank", "events": [...]} (kv_events/batch_decoder.hpp). A jump in the sequence
// numbers is reported on stderr; with --replay ENDPOINT the missed batches are fetched from the
// publisher's replay socket and printed first, in order (exit 1 when the replay endpoint sends
// nothing for --replay-timeout-ms). Ends after --count batches, or at the first SIGINT /
// SIGTERM (exit 0), also while it waits for a replay.
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "actors/kv_events/batch_decoder.hpp"
#include "actors/kv_events/replay_client.hpp"
#include "launch/cli/commands.hpp"
#include "launch/process/signal_watcher.hpp"

namespace kvc::launch {

namespace {

struct tail_options {
  std::string endpoint;
  std::string replay;
  std::string topic;
  uint64_t count = 0;  // 0: until a signal
  int64_t replay_timeout_ms = 5000;
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
bool print(const std::string& topic, uint64_t seq, std::string_view payload) {
  auto j = kv_events::decode_batch(payload);
  if (!j) {
    std::cerr << "kvconnect events tail: batch " << seq << ": " << j.error().message() << "\n";
    return false;
  }
  nlohmann::json line = {{"topic", topic}, {"seq", seq}};
  line.update(*j);
  std::cout << line.dump() << std::endl;
  return true;
}

/// Prints the batches [from, to) from the replay endpoint; how many were printed, or why the
/// replay failed. std::nullopt when a signal stopped it.
result<std::optional<uint64_t>> fill_gap(zmq::context_t& ctx, const tail_options& o,
                                         const std::string& topic, uint64_t from, uint64_t to,
                                         int stop_fd) {
  uint64_t printed = 0;
  auto r = kv_events::fetch_replay(
      ctx, {o.replay, from, std::chrono::milliseconds{o.replay_timeout_ms}, stop_fd},
      [&](uint64_t seq, std::string_view payload) {
        if (seq >= from && seq < to && print(topic, seq, payload)) ++printed;
      });
  if (!r) return r.error();
  if (*r == kv_events::replay_outcome::stopped) return std::optional<uint64_t>{};
  return std::optional<uint64_t>{printed};
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
  while (o.count == 0 || printed < o.count) {
    zmq::pollitem_t items[2] = {{sub.handle(), 0, ZMQ_POLLIN, 0},
                                {nullptr, signals.signalled_fd(), ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds{-1});
    if (signals.signalled() != 0) break;
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
      if (!o.replay.empty()) {
        auto filled = fill_gap(ctx, o, topic, *next, seq, signals.signalled_fd());
        if (!filled) {
          std::cerr << "kvconnect events tail: batches " << *next << ".." << seq - 1
                    << " not recovered: " << filled.error().message() << "\n";
          return 1;
        }
        if (!*filled) break;  // a signal
        printed += **filled;
      }
    }
    next = seq + 1;
    if (print(topic, seq, f[2].to_string_view())) ++printed;
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
  cmd->add_option("--replay-timeout-ms", o->replay_timeout_ms,
                  "The longest wait for each message of a replay answer; past it, exit 1")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--topic", o->topic, "Only batches whose topic starts with this");
  cmd->add_option("--count", o->count, "Stop after this many batches (0: at SIGINT/SIGTERM)")
      ->capture_default_str();
  cmd->callback([o, &exit_code] { exit_code = tail(*o); });
}

}  // namespace kvc::launch
