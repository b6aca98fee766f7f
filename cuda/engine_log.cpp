#include "cuda/engine_log.hpp"

#include <spdlog/spdlog.h>

namespace kvc::cuda::engine_log {

namespace {
double gib(size_t bytes) { return static_cast<double>(bytes) / (1u << 30); }
}  // namespace

void pinning_started(int device, size_t bytes, size_t chunks) {
  spdlog::info("cuda copy engine (device {}): pinning {:.1f} GiB in {} chunk(s)", device,
               gib(bytes), chunks);
}

void pinning_progress(int device, size_t pinned, size_t bytes) {
  spdlog::info("cuda copy engine (device {}): pinned {:.1f} of {:.1f} GiB", device, gib(pinned),
               gib(bytes));
}

void pinning_done(int device, size_t bytes, double seconds) {
  spdlog::info("cuda copy engine (device {}): pinned {:.1f} GiB in {:.1f} s", device, gib(bytes),
               seconds);
}

void batch_refused(int device, std::string_view reason) {
  spdlog::warn("cuda copy engine (device {}): {}; copying op by op from now on", device, reason);
}

void shutdown_timed_out(int device, long long waited_ms) {
  spdlog::error("cuda copy engine (device {}): transfers still running {} ms after shutdown "
                "began; leaving streams, events, device memory and pinned memory to the "
                "process's exit",
                device, waited_ms);
}

void numa_unknown(int device, std::string_view why) {
  spdlog::warn("cuda copy engine (device {}): NUMA node unknown: {}", device, why);
}

}  // namespace kvc::cuda::engine_log
