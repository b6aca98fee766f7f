#pragma once
/// published<T>: hands immutable snapshots from one thread (the engine's scheduler thread,
/// which publishes after each step) to readers on other threads (the /metrics thread). A
/// snapshot is never changed once published: publish() swaps in a new shared_ptr and readers
/// keep the one they took for as long as they use it, so no reader sees a half-written value
/// and no lock is held while a snapshot is built or read - the mutex only guards the pointer
/// swap and copy (a few nanoseconds, never across a step).
///
/// Thread-safe.
#include <memory>
#include <mutex>
#include <utility>

namespace kvc::metrics {

template <class T>
class published {
 public:
  void publish(T value) {
    auto next = std::make_shared<const T>(std::move(value));
    std::lock_guard<std::mutex> lock(mu_);
    current_.swap(next);
    // the previous snapshot is released outside the lock (next's destructor)
  }
  /// The latest snapshot; nullptr before the first publish.
  std::shared_ptr<const T> get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return current_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const T> current_;
};

}  // namespace kvc::metrics
