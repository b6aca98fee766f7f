#pragma once
/// deadline_stream: one accepted HTTP connection as cpp-httplib's Stream, bounded by a single
/// deadline for the whole exchange. cpp-httplib's own socket stream bounds each recv() and
/// send() alone, so a client sending one byte just inside that bound held a worker for as long
/// as it liked; here every wait runs to the same deadline, and ends early when `stop_fd`
/// becomes readable (the server stops). Reads first return the bytes the connection_gate
/// already received (the request head), then what the socket brings.
///
/// Does not own the socket. Not thread-safe: one worker uses it.
#include <chrono>
#include <string>

#include <httplib.h>

namespace kvc::metrics {

class deadline_stream final : public httplib::Stream {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  deadline_stream(int fd, std::string received, time_point deadline, int stop_fd)
      : fd_(fd), received_(std::move(received)), deadline_(deadline), stop_fd_(stop_fd) {}

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  /// Waits until the socket has `events` (POLLIN / POLLOUT); false at the deadline, at the
  /// stop, or when the socket failed.
  bool wait(short events) const;

  int fd_;
  std::string received_;
  size_t consumed_ = 0;  ///< of received_
  time_point deadline_;
  int stop_fd_;
};

}  // namespace kvc::metrics
