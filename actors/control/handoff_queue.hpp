#pragma once
/// handoff_queue<T>: hands values from an actor to a thread outside the actor system (the
/// engine's scheduler or worker thread, a process's main thread). The actor pushes and never
/// blocks; the thread takes everything without blocking once per engine step (take_all), or
/// waits for the next value with a deadline (pop_for: process drivers, never actor code).
/// close() wakes every waiter for good (the producing actor is gone).
///
/// Thread-safe: any number of producers and consumers. Shared through a std::shared_ptr by the
/// actor that pushes and the code that takes.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace kvc::control {

template <class T>
class handoff_queue {
 public:
  /// Appends a value and wakes one waiter. Values pushed after close() are still kept.
  void push(T x) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(x));
    }
    cv_.notify_one();
  }

  /// The oldest value, or std::nullopt when empty. Never blocks on an empty queue.
  std::optional<T> try_pop() {
    std::lock_guard<std::mutex> lock(mu_);
    return pop_locked();
  }

  /// Every value, oldest first. Never blocks on an empty queue.
  std::vector<T> take_all() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<T> out(std::make_move_iterator(items_.begin()),
                       std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }

  /// The oldest value; waits up to `timeout` for one. std::nullopt when none arrived in time or
  /// the queue is closed and empty.
  std::optional<T> pop_for(std::chrono::nanoseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !items_.empty() || closed_; });
    return pop_locked();
  }

  /// No more values will come: wakes every waiter.
  void close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

  bool closed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return items_.size();
  }

 private:
  std::optional<T> pop_locked() {
    if (items_.empty()) return std::nullopt;
    std::optional<T> x{std::move(items_.front())};
    items_.pop_front();
    return x;
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> items_;
  bool closed_ = false;
};

}  // namespace kvc::control
