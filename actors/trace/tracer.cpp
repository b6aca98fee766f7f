#include "actors/trace/tracer.hpp"

#include <unistd.h>

#include <chrono>
#include <mutex>
#include <utility>
#include <vector>

#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/details/file_helper.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include "proto/private_files.hpp"

namespace kvc::trace {

namespace {

/// Finished records waiting for the logger's thread, in batches. The emitting threads move
/// records in (no formatting; a batch's storage is reused once the logger's thread has written
/// it, so a busy process allocates nothing per record); the logger's thread takes every full
/// batch, formats it and hands the emptied batch back. Thread-safe.
class record_batches {
 public:
  static constexpr size_t batch_records = 256;
  static constexpr size_t max_spares = 8;

  record_batches() { open_.reserve(batch_records); }

  /// Adds `r`; true when a batch just became full (the caller wakes the logger's thread).
  bool add(trace_record&& r) {
    std::lock_guard lock{mu_};
    open_.push_back(std::move(r));
    if (open_.size() < batch_records) return false;
    full_.push_back(std::move(open_));
    if (spares_.empty()) {
      open_ = std::vector<trace_record>{};
      open_.reserve(batch_records);
    } else {
      open_ = std::move(spares_.back());
      spares_.pop_back();
    }
    return true;
  }
  /// A written batch back, emptied, for add() to fill again.
  void recycle(std::vector<trace_record>&& batch) {
    batch.clear();
    std::lock_guard lock{mu_};
    if (spares_.size() < max_spares) spares_.push_back(std::move(batch));
  }
  /// Closes the batch being filled, even if it is not full.
  void close_open() {
    std::lock_guard lock{mu_};
    if (open_.empty()) return;
    full_.push_back(std::move(open_));
    open_ = std::vector<trace_record>{};
  }
  /// Every full batch, oldest first; they leave the queue.
  std::vector<std::vector<trace_record>> take() {
    std::lock_guard lock{mu_};
    return std::exchange(full_, {});
  }

 private:
  std::mutex mu_;
  std::vector<trace_record> open_;
  std::vector<std::vector<trace_record>> full_;
  std::vector<std::vector<trace_record>> spares_;
};

/// The spdlog sink on the logger's thread: a log message is only a wake-up; the sink takes the
/// full batches and writes them as JSON lines to the file. Used by the logger's thread only
/// (spdlog's base_sink locks it anyway).
class batch_file_sink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  batch_file_sink(std::shared_ptr<record_batches> batches, const std::string& path)
      : batches_(std::move(batches)) {
    file_.open(path, /*truncate=*/true);
    line_.reserve(512);
  }

 protected:
  void sink_it_(const spdlog::details::log_msg&) override { drain(); }
  void flush_() override {
    drain();
    file_.flush();
  }

 private:
  void drain() {
    for (auto& batch : batches_->take()) {
      buf_.clear();
      for (const trace_record& r : batch) {
        line_.clear();
        append_json_line(line_, r);
        line_.push_back('\n');
        buf_.append(line_.data(), line_.data() + line_.size());
      }
      file_.write(buf_);
      batches_->recycle(std::move(batch));
    }
  }

  std::shared_ptr<record_batches> batches_;
  spdlog::details::file_helper file_;
  std::string line_;
  spdlog::memory_buf_t buf_;
};

/// Records through an spdlog async logger with its own one-thread pool (not the registry's, so
/// that several tracers of one process and the process's own async logging stay apart). The
/// emitting thread only moves the record into a batch; one log message per full batch of
/// record_batches::batch_records wakes the logger's thread, which formats the batch
/// (batch_file_sink): formatting, the message ids' strings and the file's writes all happen
/// off the threads that emit.
class spdlog_file_sink final : public trace_sink {
 public:
  spdlog_file_sink(std::shared_ptr<record_batches> batches,
                   std::shared_ptr<spdlog::details::thread_pool> pool,
                   std::shared_ptr<spdlog::async_logger> logger)
      : batches_(std::move(batches)), pool_(std::move(pool)), logger_(std::move(logger)) {}
  ~spdlog_file_sink() override {
    batches_->close_open();
    logger_->flush();
    logger_.reset();  // the pool's thread drains what is queued before it ends
    pool_.reset();
  }
  void write(const trace_record& r) override { take(trace_record{r}); }
  void take(trace_record&& r) override {
    if (batches_->add(std::move(r))) logger_->info("");
  }

 private:
  std::shared_ptr<record_batches> batches_;
  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::async_logger> logger_;
};

}  // namespace

result<std::shared_ptr<tracer>> tracer::open(trace_level level, const std::string& dir,
                                             std::string role, const std::string& tag,
                                             uint32_t node) {
  if (level == trace_level::off) {
    return make_error(errc::invalid_argument, "trace: open with level off");
  }
  if (dir.empty()) return make_error(errc::invalid_argument, "trace: no trace directory");
  if (auto st = make_private_dir(dir); !st) return make_error(st.code(), "trace: " + st.message());
  std::string path = dir + "/" + role + "-" + std::to_string(::getpid());
  if (!tag.empty()) path += "-" + tag;
  path += ".jsonl";
  // Created private first; the logger's file opens it again, truncating, mode kept.
  auto fd = create_private_file(path);
  if (!fd) return make_error(fd.code(), "trace: " + fd.error().message());
  ::close(*fd);
  try {
    // The queue holds wake-ups only (one per batch), so a short one suffices.
    auto pool = std::make_shared<spdlog::details::thread_pool>(1024, 1);
    auto batches = std::make_shared<record_batches>();
    auto file = std::make_shared<batch_file_sink>(batches, path);
    auto logger = std::make_shared<spdlog::async_logger>("kvc.trace", std::move(file), pool,
                                                         spdlog::async_overflow_policy::block);
    logger->set_level(spdlog::level::info);
    auto t = std::make_shared<tracer>(
        level,
        std::make_shared<spdlog_file_sink>(std::move(batches), std::move(pool), std::move(logger)),
        std::move(role), node);
    t->path_ = std::move(path);
    return t;
  } catch (const std::exception& e) {
    return make_error(errc::io_error, "trace: cannot open " + path + ": " + e.what());
  }
}

tracer::tracer(trace_level level, std::shared_ptr<trace_sink> sink, std::string role, uint32_t node)
    : level_(level),
      sink_(std::move(sink)),
      role_(std::move(role)),
      node_(node),
      pid_(::getpid()) {}

int64_t tracer::mono_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void tracer::emit(trace_record r) {
  if (r.mono_ns == 0) r.mono_ns = mono_now();
  if (r.wall_ns == 0) {
    r.wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  }
  r.node = node_;
  r.pid = pid_;
  if (r.role.empty()) r.role = role_;
  if (r.track.empty()) r.track = role_;
  sink_->take(std::move(r));
}

}  // namespace kvc::trace
