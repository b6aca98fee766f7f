#pragma once
/// device_kernels: the small kernels the device tests (cuda_device_test) put on an engine user's
/// compute stream, behind a plain C++ interface (streams are opaque, codes are cudaError_t as
/// int) so that the tests themselves compile as C++. Every kernel runs as one block: thread 0
/// spins, then all threads do the bytes, so nothing happens before the spin ended.
///
/// Spins are bounded by a cycle count (clock64: SM cycles, about 1.5–2 GHz on H100/H200), so a
/// kernel can never hold a GPU forever, whatever the test does. Each launcher returns the
/// launch's error (cudaGetLastError right after it), 0 on success. Test support.
#include <cstddef>
#include <cstdint>

namespace kvc::cuda::testing {

/// Spins `cycles`, then writes `value` into `n` bytes at device pointer `dst`.
int launch_spin_then_fill(void* stream, void* dst, size_t n, uint8_t value, int64_t cycles);

/// Spins `cycles`, then copies `n` bytes device → device (`src` → `dst`).
int launch_spin_then_copy(void* stream, const void* src, void* dst, size_t n, int64_t cycles);

/// Spins until the host sets `*flag` (a device pointer to mapped pinned memory) non-zero, or
/// `max_cycles` passed; writes 1 to `*timed_out` (a device pointer) in the second case.
int launch_wait_for_flag(void* stream, const int* flag, int* timed_out, int64_t max_cycles);

/// Writes through `bad` (an address no allocation holds): the device faults with a sticky error
/// (cudaErrorIllegalAddress) and the context is unusable from then on.
int launch_write_through(void* stream, int* bad);

}  // namespace kvc::cuda::testing
