#pragma once
/// metrics_server: serves GET /metrics (Prometheus text, content type text/plain;
/// version=0.0.4) over HTTP/1.1, from a thread of its own that accepts connections and a few
/// worker threads that answer them (cpp-httplib parses the request and writes the answer).
/// Each scrape calls `render` on a worker thread, possibly on several at once: it must only
/// read state that is safe to read there (scheduler_connector passes a function that renders
/// the latest published<> snapshot). Other paths answer 404.
///
/// No client can starve a scrape (connection_gate): a connection holds a worker only once its
/// request head has arrived in full; every connection has one deadline from its accept to the
/// end of its answer (request_timeout, not moved by the bytes received); at most
/// max_connections are open, a new one taking the slot of the oldest still waiting for its
/// head. Each answer closes its connection (`Connection: close`): an idle keep-alive
/// connection holds nothing.
///
/// Life cycle: start() binds host:port (0: a free port; port() tells which) and starts serving;
/// the destructor (or stop()) stops the server, closes every connection and joins its
/// threads. Thread-safe: port() and stop() from any thread.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/metrics/connection_gate.hpp"
#include "proto/status.hpp"

namespace kvc::metrics {

struct server_options {
  size_t threads = 4;  ///< workers answering requests (>= 1)
  gate_limits gate;    ///< max_connections, max_head_bytes, request_timeout
};

class metrics_server {
 public:
  using render_fn = std::function<std::string()>;

  /// errc::io_error when host:port cannot be bound (in use, bad address);
  /// errc::invalid_argument for 0 threads, 0 connections or a request_timeout <= 0.
  static result<std::unique_ptr<metrics_server>> start(const std::string& host, uint16_t port,
                                                       render_fn render,
                                                       const server_options& options = {});
  ~metrics_server();
  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  uint16_t port() const noexcept { return port_; }
  /// Stops serving and joins the threads; idempotent.
  void stop();

 private:
  struct impl;
  explicit metrics_server(std::unique_ptr<impl> p, uint16_t port);
  std::unique_ptr<impl> impl_;
  uint16_t port_;
};

}  // namespace kvc::metrics
