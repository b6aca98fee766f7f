#pragma once
/// engine_data_plane: the coordinator role hosted on the engine's scheduler thread, with the
/// step's messages on ZeroMQ (runtime/data_plane.hpp) instead of CAF. scheduler_connector uses it
/// unless its config asks for the CAF data plane: each step's metadata is encoded once and sent
/// from the engine thread to every rank, and the ranks' reports are read and aggregated in the
/// same thread when the engine polls, so no actor is scheduled per step (docs/architecture.md
/// "Data plane"). Registration, supervision and stop stay with the CAF scheduler actor, which
/// sends rank_up / rank_down to the engine thread (in that order per rank; the caller passes
/// them on here).
///
/// Routing. A worker connects a DEALER after its registration was accepted and sends a hello
/// (rank, incarnation); the hello is routed once rank_up announced that incarnation (a hello that
/// comes first waits for it). A report is accepted only from the peer routed for its rank and
/// incarnation; anything else is dropped with a warning. Metadata goes to routed ranks; a rank
/// that registered and has not said hello yet gets its steps queued (up to max_backlog, then
/// they are dropped with a warning) and sent on its hello, so that, as with CAF, every step
/// planned after a rank's registration reaches it. A rank that is down gets nothing: its jobs
/// fail through rank_down.
///
/// Not thread-safe: the engine's scheduler thread owns it.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/coordinator/step_coordinator.hpp"
#include "actors/runtime/data_plane.hpp"
#include "proto/completion.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"

namespace kvc::embed {

class engine_data_plane {
 public:
  /// Binds the server (tcp on `tcp_host` unless empty; inproc always). Errors: the
  /// coordinator's config (world size, timeout) and the binds' (errc::io_error).
  /// Hellos must carry `token` (the deployment's shared secret).
  static result<std::unique_ptr<engine_data_plane>> create(uint32_t world_size,
                                                           std::chrono::nanoseconds job_timeout,
                                                           const std::string& tcp_host,
                                                           std::string token);

  const runtime::data_plane_server& server() const noexcept { return *server_; }

  // --- from the scheduler actor, in its order ---
  void rank_up(rank_id rank, uint32_t incarnation);
  void rank_down(rank_id rank);

  /// Expects the step's jobs (deadlines from `now`) and sends the metadata to every routed rank.
  void send_step(const connector_metadata& meta, uint64_t now);
  /// Handles inbound frames: waits up to `timeout` for the first, then takes what else is
  /// there without waiting. Returns how many were handled.
  size_t pump(std::chrono::milliseconds timeout);
  void tick(uint64_t now);
  std::optional<connector_output> poll_output() { return core_.poll_output(); }
  bool needs_tick() const noexcept { return core_.needs_tick(); }

  /// Ranks with a routed data-plane connection.
  uint32_t routed_ranks() const noexcept;
  /// A report of this (rank, incarnation, step) was dropped or a send failed (tests, logs).
  uint64_t dropped_frames() const noexcept { return dropped_; }

 private:
  /// Steps queued for a registered rank whose hello has not come yet.
  static constexpr size_t max_backlog = 4096;

  struct route {
    std::string peer;          // routing id; empty: none
    uint32_t incarnation = 0;  // of the peer
    bool routed = false;       // rank_up announced this incarnation
    std::vector<std::pair<step_id, runtime::wire_bytes>> backlog;
  };

  engine_data_plane(coordinator::step_coordinator core,
                    std::unique_ptr<runtime::data_plane_server> server, uint32_t world_size,
                    std::string token);
  void handle(runtime::inbound_frame& frame);
  void send_to(rank_id rank, step_id step, const runtime::wire_bytes& bytes);
  /// Sends the rank's backlog once it is routed.
  void flush(rank_id rank);
  void on_hello(const std::string& peer, const runtime::wire_hello& h);
  void on_report(const std::string& peer, const runtime::step_report& r);

  coordinator::step_coordinator core_;
  std::unique_ptr<runtime::data_plane_server> server_;
  std::string token_;
  std::vector<route> routes_;                    // by rank
  std::vector<std::optional<uint32_t>> live_;    // by rank: the incarnation rank_up announced
  uint64_t dropped_ = 0;
};

}  // namespace kvc::embed
