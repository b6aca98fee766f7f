#pragma once
/// The step channel's recording decorators: a server_transport and a client_transport that
/// pass every call to the transport they wrap and write one trace record per frame sent or
/// received (kind, step, rank, bytes and the message id both ends derive; trace_record.hpp).
/// They sit at the transport seam (channel/transport.hpp), so they stack with any other
/// decorator there (injected faults) and see exactly the frames the channel's logic sees.
///
/// A frame whose leading fields cannot be read is still passed on (the channel's logic refuses
/// it with its own error) and recorded with type "malformed".
///
/// Own the wrapped transport. Used by one thread at a time, like the transport they wrap.
#include <memory>
#include <string>
#include <string_view>

#include "actors/channel/transport.hpp"
#include "actors/trace/tracer.hpp"
#include "proto/connector_metadata.hpp"

namespace kvc::trace {

class traced_server_transport final : public channel::server_transport {
 public:
  traced_server_transport(std::unique_ptr<channel::server_transport> inner,
                          std::shared_ptr<tracer> t);

  const std::string& remote_endpoint() const noexcept override;
  /// The wrapped transport's connection, unwrapped: a rank of this process records through
  /// its own decorator (traced_client_transport).
  result<std::unique_ptr<channel::client_transport>> connect_local(
      const std::string& peer) override;
  status send(std::string_view peer, std::span<const char> bytes) override;
  result<std::optional<channel::inbound_frame>> receive(std::chrono::milliseconds timeout) override;

 private:
  std::unique_ptr<channel::server_transport> inner_;
  std::shared_ptr<tracer> tracer_;
};

class traced_client_transport final : public channel::client_transport {
 public:
  /// `peer` is this connection's routing id (channel::peer_id), `track` the rank's track name.
  traced_client_transport(std::unique_ptr<channel::client_transport> inner,
                          std::shared_ptr<tracer> t, std::string peer, std::string track);

  status send(std::span<const char> bytes) override;
  result<std::optional<channel::wire_bytes>> receive(std::chrono::milliseconds timeout) override;

 private:
  std::unique_ptr<channel::client_transport> inner_;
  std::shared_ptr<tracer> tracer_;
  std::string peer_;
  std::string track_;
};

/// The rank of a routing id "r<rank>.<incarnation>"; -1 when it has another shape.
int64_t rank_of_peer(std::string_view peer) noexcept;
/// The incarnation of a routing id "r<rank>.<incarnation>"; -1 when it has another shape.
int64_t incarnation_of_peer(std::string_view peer) noexcept;
/// The track of a rank's records: "rank <r>".
std::string rank_track(int64_t rank);
/// The track of the scheduler's records about the file tier's jobs of one kind: "tier
/// promotion", "tier cascade", "tier check" (each apart from the GPU transfers' "scheduler").
std::string tier_track(transfer_kind kind);
/// Whether `track` is one of tier_track's.
bool is_tier_track(std::string_view track) noexcept;

}  // namespace kvc::trace
