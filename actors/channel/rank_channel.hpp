#pragma once
/// rank_channel: a rank's end of the step channel (scheduler_channel.hpp is the other end). It
/// says hello once (rank, incarnation, token) when it opens, then takes each step's
/// connector_metadata in step order and sends the rank's step_report of each step.
///
/// Not thread-safe: the rank's worker thread owns it.
#include <chrono>
#include <memory>
#include <optional>

#include "actors/channel/transport.hpp"
#include "proto/connector_metadata.hpp"
#include "proto/status.hpp"
#include "proto/step_report.hpp"

namespace kvc::channel {

class rank_channel {
 public:
  /// Sends the hello on `transport`. errc::invalid_argument without a transport; the
  /// transport's error when the hello cannot be sent.
  static result<std::unique_ptr<rank_channel>> open(std::unique_ptr<client_transport> transport,
                                                    const wire_hello& hello);

  /// The next step's metadata, waiting up to `timeout`; std::nullopt when none came. A frame
  /// that does not decode as metadata is errc::protocol_mismatch (it is dropped; the next call
  /// goes on).
  result<std::optional<connector_metadata>> next_step(std::chrono::milliseconds timeout);
  /// Sends this rank's report of one step.
  status send_report(const step_report& report);

 private:
  explicit rank_channel(std::unique_ptr<client_transport> transport)
      : transport_(std::move(transport)) {}

  std::unique_ptr<client_transport> transport_;
};

}  // namespace kvc::channel
