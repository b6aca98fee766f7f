#include "launch/process/signal_watcher.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdint>

namespace kvc::launch {

signal_watcher::signal_watcher() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
  signal_fd_ = ::signalfd(-1, &set, SFD_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  const int signalled = ::eventfd(0, EFD_CLOEXEC);
  if (signal_fd_ < 0 || stop_fd_ < 0 || signalled < 0) {
    if (signalled >= 0) ::close(signalled);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    return;
  }
  signalled_fd_ = signalled;
  thread_ = std::thread([this] { run(); });
}

signal_watcher::~signal_watcher() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (signal_fd_ >= 0) ::close(signal_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (signalled_fd_ >= 0) ::close(signalled_fd_);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void signal_watcher::run() {
  pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents) return;
    if (!fds[0].revents) continue;
    signalfd_siginfo info;
    if (::read(signal_fd_, &info, sizeof info) != sizeof info) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (signal_ != 0) {  // a second signal: the orderly shutdown takes too long
      const int sig = static_cast<int>(info.ssi_signo);
      if (fast_exit_) fast_exit_();
      ::_exit(128 + sig);
    }
    signal_ = static_cast<int>(info.ssi_signo);
    const uint64_t one = 1;
    (void)!::write(signalled_fd_, &one, sizeof one);
    cv_.notify_all();
    if (callback_) callback_(signal_);
  }
}

void signal_watcher::on_signal(std::function<void(int)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  callback_ = std::move(callback);
  if (callback_ && signal_ != 0) callback_(signal_);
}

void signal_watcher::on_second_signal(std::function<void()> cleanup) {
  std::lock_guard<std::mutex> lock(mu_);
  fast_exit_ = std::move(cleanup);
}

int signal_watcher::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return signal_ != 0; });
  return signal_;
}

int signal_watcher::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [this] { return signal_ != 0; });
  return signal_;
}

int signal_watcher::signalled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return signal_;
}

}  // namespace kvc::launch
