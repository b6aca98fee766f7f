#include "actors/metrics/metrics_server.hpp"

#include <sys/socket.h>

#include <atomic>
#include <thread>
#include <utility>

#include <httplib.h>

namespace kvc::metrics {

struct metrics_server::impl {
  httplib::Server server;
  std::thread thread;
  std::atomic<bool> done{false};  // listen_after_bind returned
};

metrics_server::metrics_server(std::unique_ptr<impl> p, uint16_t port)
    : impl_(std::move(p)), port_(port) {}

metrics_server::~metrics_server() {
  stop();
}

result<std::unique_ptr<metrics_server>> metrics_server::start(const std::string& host,
                                                              uint16_t port, render_fn render) {
  auto p = std::make_unique<impl>();
  // One worker: scrapes are rare and each renders a snapshot; no pool of idle threads.
  p->server.new_task_queue = [] { return new httplib::ThreadPool(1); };
  // httplib's default adds SO_REUSEPORT: a second server on a port in use would bind too and
  // share it silently. SO_REUSEADDR alone: a port held by another listener is an error.
  p->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  p->server.Get("/metrics",
                [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
                  res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
                });
  int bound = 0;
  if (port == 0) {
    bound = p->server.bind_to_any_port(host);
  } else if (p->server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return make_error(errc::io_error, "metrics: cannot listen on " + host + ":" +
                                          std::to_string(port) +
                                          " (in use or not an address "
                                          "of this host)");
  }
  impl* raw = p.get();
  p->thread = std::thread([raw] {
    raw->server.listen_after_bind();
    raw->done = true;
  });
  return std::unique_ptr<metrics_server>{
      new metrics_server(std::move(p), static_cast<uint16_t>(bound))};
}

void metrics_server::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  // httplib's stop() only acts once the loop runs; until the thread got there, ask again (the
  // thread is started, so it gets there, and then the request is seen).
  while (!impl_->done) {
    impl_->server.stop();
    if (!impl_->done) std::this_thread::yield();
  }
  impl_->thread.join();
}

}  // namespace kvc::metrics
