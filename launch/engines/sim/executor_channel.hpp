#pragma once
/// executor_channel: how the simulated engine's scheduler process gives every worker process the
/// step's model input, as vLLM's executor broadcasts its SchedulerOutput to its workers: apart
/// from the KV connector (whose metadata travels on the step channel). One ZeroMQ XPUB socket on
/// the scheduler side, one SUB per worker; a message is a model_input (or the end of the run)
/// as MessagePack. The XPUB side sees each subscription, so the scheduler waits until every
/// worker subscribed before the first step (no message lost to a late joiner).
///
/// Workers may run on other nodes (the XPUB binds on topology.nodes[0].host at a fixed port
/// there): the XPUB is a ZeroMQ PLAIN server whose ZAP handler (actors/channel/zap_handler.hpp,
/// the step channel's) admits only the deployment's token as password. A peer without it is
/// disconnected during the handshake: its subscription never reaches the XPUB (it is not
/// counted) and it receives no model input.
///
/// Each object is used by one thread. Errors are kvc::status (errc::io_error for ZeroMQ's,
/// errc::timeout, errc::protocol_mismatch for a message that does not decode).
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launch/engines/sim/sim_scheduler.hpp"
#include "proto/status.hpp"

namespace kvc::sim {

/// One message: the next step's model input, or the end of the run (`end`: no input follows).
struct executor_message {
  bool end = false;
  model_input input;
};

/// The message as MessagePack bytes, and back (errc::protocol_mismatch when malformed).
std::string encode(const executor_message& m);
result<executor_message> decode(std::string_view bytes);

class executor_publisher {
 public:
  /// Binds tcp://host:port (port 0: a free one); subscribers must present `token` (1 to 255
  /// bytes) as their PLAIN password. errc::invalid_argument for a bad token, errc::io_error
  /// when the bind fails.
  static result<std::unique_ptr<executor_publisher>> create(const std::string& host,
                                                            uint16_t port,
                                                            const std::string& token);
  ~executor_publisher();
  /// Where workers connect ("tcp://127.0.0.1:40123").
  const std::string& endpoint() const noexcept;
  /// Waits until `subscribers` subscriptions arrived (in total, since creation).
  status wait_for_subscribers(uint32_t subscribers, std::chrono::milliseconds timeout);
  status publish(const executor_message& m);
  /// Handshakes refused (a wrong or missing token).
  uint64_t refused_handshakes() const noexcept;

 private:
  struct impl;
  explicit executor_publisher(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

class executor_subscriber {
 public:
  /// Connects to `endpoint` with `token` as the PLAIN password (ZeroMQ connects in the
  /// background: a refused token shows as no message ever arriving).
  static result<std::unique_ptr<executor_subscriber>> connect(const std::string& endpoint,
                                                              const std::string& token);
  ~executor_subscriber();
  /// The next message, waiting up to `timeout`; nullopt when none came.
  result<std::optional<executor_message>> receive(std::chrono::milliseconds timeout);

 private:
  struct impl;
  explicit executor_subscriber(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace kvc::sim
