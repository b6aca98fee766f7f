#pragma once
/// scheduler_channel: the scheduler's end of the step channel, the one path of a step's
/// messages: each step's connector_metadata out to every live rank (encoded once), each rank's
/// step_report back. It decides which connection speaks for which rank; what the reports mean is
/// the coordinator's business (coordinator/blocking_coordinator.hpp hands them on).
///
/// Routing. A rank's end connects after its registration was accepted and sends a hello (rank,
/// incarnation, token); the hello is routed once rank_up announced that incarnation (a hello
/// that comes first waits for it). A hello with another token, a rank outside the world or an
/// incarnation below the live one is dropped. A report is accepted only from the peer routed for
/// its rank and incarnation. Metadata goes to routed ranks; a rank that registered and has not
/// said hello yet gets its steps queued (up to max_backlog, then they are dropped) and sent on
/// its hello, so that every step planned after a rank's registration reaches it. A rank that is
/// down gets nothing: its jobs fail through rank_down at the coordinator.
///
/// Every frame that is dropped is counted and returned as a note for the caller to log (this
/// class logs nothing). Hooks that watch or perturb the step's messages (traces, injected
/// faults, recording) attach here and in rank_channel, once.
///
/// Not thread-safe: the engine's scheduler thread owns it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/channel/transport.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"
#include "proto/step_report.hpp"

namespace kvc::channel {

class scheduler_channel {
 public:
  /// Hellos must carry `token`. errc::invalid_argument for a world of 0 or no transport.
  static result<std::unique_ptr<scheduler_channel>> create(
      std::unique_ptr<server_transport> transport, uint32_t world_size, std::string token);

  server_transport& transport() noexcept { return *transport_; }

  // --- from the control plane (registration, supervision), in its order per rank ---
  void rank_up(rank_id rank, uint32_t incarnation);
  void rank_down(rank_id rank);

  /// Sends the metadata to every routed rank and queues it for registered ones without a hello.
  void send_step(const connector_metadata& meta);
  /// Handles inbound frames: waits up to `timeout` for the first, then takes what else is there
  /// without waiting. Accepted reports are appended to `reports`. Returns how many frames were
  /// handled.
  size_t receive(std::chrono::milliseconds timeout, std::vector<step_report>& reports);

  /// Ranks with a routed connection.
  uint32_t routed_ranks() const noexcept;
  /// Steps queued for registered ranks whose hello has not come (0 once every rank said hello).
  size_t queued_steps() const noexcept;
  /// Frames dropped or sends that failed since the start.
  uint64_t dropped_frames() const noexcept { return dropped_; }
  /// Why frames were dropped since the last call (one line each), for the caller to log.
  std::vector<std::string> take_notes() { return std::exchange(notes_, {}); }

 private:
  /// Steps queued for a registered rank whose hello has not come yet.
  static constexpr size_t max_backlog = 4096;

  struct route {
    std::string peer;          // routing id; empty: none
    uint32_t incarnation = 0;  // of the peer
    bool routed = false;       // rank_up announced this incarnation
    std::vector<std::pair<step_id, wire_bytes>> backlog;
  };

  scheduler_channel(std::unique_ptr<server_transport> transport, uint32_t world_size,
                    std::string token);
  void drop(std::string note);
  void handle(inbound_frame& frame, std::vector<step_report>& reports);
  void send_to(rank_id rank, step_id step, const wire_bytes& bytes);
  /// Sends the rank's backlog once it is routed.
  void flush(rank_id rank);
  void on_hello(const std::string& peer, const wire_hello& h);
  bool accepts(const std::string& peer, const step_report& r);

  std::unique_ptr<server_transport> transport_;
  std::string token_;
  std::vector<route> routes_;                  // by rank
  std::vector<std::optional<uint32_t>> live_;  // by rank: the incarnation rank_up announced
  uint64_t dropped_ = 0;
  std::vector<std::string> notes_;
};

}  // namespace kvc::channel
