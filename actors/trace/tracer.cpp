#include "actors/trace/tracer.hpp"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <system_error>
#include <utility>

#include <spdlog/async_logger.h>
#include <spdlog/details/thread_pool.h>
#include <spdlog/sinks/basic_file_sink.h>

namespace kvc::trace {

namespace {

/// Lines through an spdlog async logger with its own one-thread pool (not the registry's, so
/// that several tracers of one process and the process's own async logging stay apart). Lines
/// are handed to the logger in chunks of about `chunk_bytes`, one log message each: a message
/// per record would wake the logger's thread once per record, which on a busy host costs more
/// than everything else a record does.
class spdlog_file_sink final : public trace_sink {
 public:
  static constexpr size_t chunk_bytes = 64 * 1024;

  spdlog_file_sink(std::shared_ptr<spdlog::details::thread_pool> pool,
                   std::shared_ptr<spdlog::async_logger> logger)
      : pool_(std::move(pool)), logger_(std::move(logger)) {
    chunk_.reserve(chunk_bytes + 1024);
  }
  ~spdlog_file_sink() override {
    {
      std::lock_guard lock{mu_};
      hand_over();
    }
    logger_->flush();
    logger_.reset();  // the pool's thread drains what is queued before it ends
    pool_.reset();
  }
  void write(const trace_record& r) override {
    std::string line = to_json_line(r);
    std::lock_guard lock{mu_};
    if (!chunk_.empty()) chunk_.push_back('\n');
    chunk_ += line;
    if (chunk_.size() >= chunk_bytes) hand_over();
  }

 private:
  /// The chunk to the logger (its sink ends it with a newline). Holds mu_.
  void hand_over() {
    if (chunk_.empty()) return;
    logger_->info(chunk_);
    chunk_.clear();
  }

  std::shared_ptr<spdlog::details::thread_pool> pool_;
  std::shared_ptr<spdlog::async_logger> logger_;
  std::mutex mu_;
  std::string chunk_;
};

}  // namespace

result<std::shared_ptr<tracer>> tracer::open(trace_level level, const std::string& dir,
                                             std::string role, const std::string& tag,
                                             uint32_t node) {
  if (level == trace_level::off) {
    return make_error(errc::invalid_argument, "trace: open with level off");
  }
  if (dir.empty()) return make_error(errc::invalid_argument, "trace: no trace directory");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return make_error(errc::io_error,
                      "trace: cannot create the directory " + dir + ": " + ec.message());
  }
  std::string path = dir + "/" + role + "-" + std::to_string(::getpid());
  if (!tag.empty()) path += "-" + tag;
  path += ".jsonl";
  try {
    auto pool = std::make_shared<spdlog::details::thread_pool>(8192, 1);
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/true);
    auto logger = std::make_shared<spdlog::async_logger>("kvc.trace", std::move(file), pool,
                                                         spdlog::async_overflow_policy::block);
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::info);
    auto t = std::make_shared<tracer>(
        level, std::make_shared<spdlog_file_sink>(std::move(pool), std::move(logger)),
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
  sink_->write(r);
}

}  // namespace kvc::trace
