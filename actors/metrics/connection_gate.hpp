#pragma once
/// connection_gate: decides which HTTP connections the metrics server keeps, so that no client
/// can starve a scrape. A connection waits in the gate, holding no worker, until its request
/// head (request line and headers, up to the blank line) has arrived in full; only then does a
/// worker answer it. Every connection has one deadline, its accept time plus
/// `request_timeout`, which no byte received moves: a client that sends nothing, or one byte
/// at a time, is closed when it passes, and the worker answering a request stops at it too.
///
/// At most `max_connections` are open at once (waiting or being answered). A new connection
/// beyond that takes the slot of the oldest connection still waiting for its head, which is
/// closed; when every slot is being answered, the new one is refused (closed at once). So a
/// flood of idle connections costs a client that sends its request at once nothing, and the
/// memory held per connection is its head, at most `max_head_bytes`.
///
/// Pure: no I/O, no clock (times are passed in); connections are named by the caller's id (the
/// socket). Not thread-safe: the server's accepting thread owns it; the count of connections
/// being answered is passed in by the caller.
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvc::metrics {

struct gate_limits {
  size_t max_connections = 64;                      ///< open at once, waiting or answered (>= 1)
  size_t max_head_bytes = 8192;                     ///< request line and headers
  std::chrono::milliseconds request_timeout{5000};  ///< from accept to the end of the answer
};

class connection_gate {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  explicit connection_gate(gate_limits limits) : limits_(limits) {}

  struct admission {
    bool admitted = false;
    std::optional<int> evicted;  ///< a waiting connection to close to make room
  };
  /// Connection `id` accepted at `now`, while `answering` connections are with the workers.
  admission admit(int id, time_point now, size_t answering);

  enum class head { incomplete, complete, too_large };
  /// Appends bytes received on waiting connection `id`: whether its head is now complete, or
  /// larger than max_head_bytes without its end (then close it and drop() it).
  head append(int id, std::string_view bytes);

  struct ready {
    std::string received;  ///< the head and whatever followed it
    time_point deadline;
  };
  /// Takes a connection whose head is complete out of the gate, for a worker; it counts among
  /// `answering` from then on.
  ready dispatch(int id);
  /// Forgets a waiting connection that was closed (peer gone, head too large, expired).
  void drop(int id);

  /// The waiting connections whose deadline passed at `now` (close and drop() them).
  std::vector<int> expired(time_point now) const;
  /// The earliest deadline of a waiting connection; std::nullopt when none waits.
  std::optional<time_point> next_deadline() const;
  /// The waiting connections, oldest first.
  std::vector<int> waiting() const;

  const gate_limits& limits() const noexcept { return limits_; }

 private:
  struct entry {
    int id;
    time_point deadline;
    std::string received;
  };
  entry* find(int id);

  gate_limits limits_;
  std::vector<entry> waiting_;  // in admission order: the oldest first
};

}  // namespace kvc::metrics
