#pragma once
/// signal_watcher: turns SIGINT / SIGTERM into an orderly shutdown of a kvconnect process. The
/// constructor blocks both signals in the calling thread, so construct it in main before the
/// actor system starts its threads (they inherit the mask and never see the signals); a thread
/// of its own then reads them from a signalfd. The first signal sets signalled(), wakes wait(),
/// makes signalled_fd() readable and runs the callback. A second signal is a fast exit: the
/// on_second_signal cleanup runs (remove what must not outlive the process, nothing that waits) and
/// the process ends with 128 + the signal's number.
///
/// Thread-safe. The callback runs on the watcher's thread under the watcher's lock: on_signal()
/// (also with nullptr, to clear it before what it touches goes away) waits for a running
/// callback to finish. The destructor stops the thread and restores the signal mask.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include <signal.h>

namespace kvc::launch {

class signal_watcher {
 public:
  signal_watcher();
  ~signal_watcher();
  signal_watcher(const signal_watcher&) = delete;
  signal_watcher& operator=(const signal_watcher&) = delete;

  /// Sets the callback; runs it at once if a signal arrived already. nullptr clears it.
  void on_signal(std::function<void(int)> callback);
  /// What a second signal runs before the process exits at once (nullptr: nothing).
  void on_second_signal(std::function<void()> cleanup);
  /// Blocks until a signal arrived; returns its number.
  int wait();
  /// Blocks until a signal arrived or `timeout` passed; the signal, 0 if none.
  int wait_for(std::chrono::milliseconds timeout);
  /// The signal received so far, 0 if none.
  int signalled() const;
  /// A descriptor that becomes readable at the first signal and stays so, for a poll() that
  /// must also end on a signal; -1 when not active().
  int signalled_fd() const noexcept { return signalled_fd_; }
  /// False when the signalfd could not be set up (then signals keep their default action).
  bool active() const noexcept { return thread_.joinable(); }

 private:
  void run();

  sigset_t old_mask_;
  int signal_fd_ = -1;
  int stop_fd_ = -1;
  int signalled_fd_ = -1;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::function<void(int)> callback_;
  std::function<void()> fast_exit_;
  int signal_ = 0;
  std::thread thread_;
};

}  // namespace kvc::launch
