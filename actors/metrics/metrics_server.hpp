#pragma once
/// metrics_server: serves GET /metrics (Prometheus text, content type text/plain;
/// version=0.0.4) over HTTP with cpp-httplib, from a thread of its own with one worker thread.
/// Each scrape calls `render` on that thread: it must only read state that is safe to read
/// there (scheduler_connector passes a function that renders the latest published<> snapshot).
/// Other paths answer 404.
///
/// Life cycle: start() binds host:port (0: a free port; port() tells which) and starts serving;
/// the destructor (or stop()) stops the server and joins its thread. Thread-safe: port() and
/// stop() from any thread.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "proto/status.hpp"

namespace kvc::metrics {

class metrics_server {
 public:
  using render_fn = std::function<std::string()>;

  /// errc::io_error when host:port cannot be bound (in use, bad address).
  static result<std::unique_ptr<metrics_server>> start(const std::string& host, uint16_t port,
                                                       render_fn render);
  ~metrics_server();
  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;

  uint16_t port() const noexcept { return port_; }
  /// Stops serving and joins the thread; idempotent.
  void stop();

 private:
  struct impl;
  explicit metrics_server(std::unique_ptr<impl> p, uint16_t port);
  std::unique_ptr<impl> impl_;
  uint16_t port_;
};

}  // namespace kvc::metrics
