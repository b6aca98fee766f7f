#pragma once
/// engine_log: the cuda backend's log lines, written here in plain C++ (spdlog) so that the
/// backend's .cu files need no logging headers under nvcc. One function per event.
#include <cstddef>
#include <string_view>

namespace kvc::cuda::engine_log {

void pinning_started(int device, size_t bytes, size_t chunks);
void pinning_progress(int device, size_t pinned, size_t bytes);
void pinning_done(int device, size_t bytes, double seconds);
/// Once per engine: the driver refused cudaMemcpyBatchAsync; copies go op by op from now on.
void batch_refused(int device, std::string_view reason);
/// The destructor gave up waiting for the streams and frees nothing.
void shutdown_timed_out(int device, long long waited_ms);
void numa_unknown(int device, std::string_view why);

}  // namespace kvc::cuda::engine_log
