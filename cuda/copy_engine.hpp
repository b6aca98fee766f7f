#pragma once
/// copy_engine: moves KV bytes between one GPU's memory and the rank's region of the pinned CPU
/// pool. Implementations: sim (always built; host memory stands in for GPU memory, copies run
/// on one copy thread per direction), manual (always built; like sim but without threads:
/// transfers complete only when the owner waits or advances it), cuda (built when nvcc is
/// found), and the faulty decorator.
///
/// Life cycle of a transfer (NIXL-style): submit() returns at once with an id; poll() never
/// blocks ("pending" is a state, not an error); wait() blocks until given transfers finished;
/// take_finished() hands each finished transfer's report out exactly once. Completion is FIFO
/// per direction; loads and stores overlap.
///
/// Thread-safety: one owner thread calls submit/poll/wait/take_finished; implementations may
/// use internal threads.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "proto/status.hpp"

namespace kvc::cuda {

enum class direction : uint8_t { gpu_to_cpu = 0, cpu_to_gpu = 1 };
constexpr std::string_view to_string(direction d) noexcept {
  return d == direction::gpu_to_cpu ? "gpu_to_cpu" : "cpu_to_gpu";
}

/// One contiguous copy. Pointers are in this process's address space: device pointers for the
/// GPU side, pool pointers for the CPU side.
struct copy_op {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t bytes = 0;
};

using transfer_id = uint64_t;

enum class poll_state : uint8_t { pending = 0, done = 1, failed = 2, unknown = 3 };

/// What a finished transfer reports (for completion events and metrics).
struct transfer_report {
  transfer_id id = 0;
  direction dir = direction::gpu_to_cpu;
  bool ok = false;
  errc error = errc::ok;  ///< why it failed, errc::ok on success
  uint64_t bytes = 0;
  double seconds = 0.0;  ///< from start of copying to completion
  /// Why it failed in words, "" on success: the cuda backend names the call and the CUDA error
  /// ("cudaEventQuery returned cudaErrorIllegalAddress (700)"), the faulty decorator the fault.
  std::string detail;
};

/// Options of one submit: how the copy is ordered against the work that writes or reads the same
/// GPU blocks (the model's compute stream).
///   wait_event     an opaque device event the copy waits for before touching GPU memory (the
///                  CUDA backend takes a cudaEvent_t recorded on the compute stream after the
///                  last kernel that writes the blocks to store / reads the blocks to overwrite).
///   no_dependency  the caller states that no device work in flight touches these blocks (set-up,
///                  benchmarks, tests, or after synchronising the device itself).
/// The cuda backend refuses a submit with neither (errc::invalid_argument): without an event a
/// store may read blocks a kernel is still writing, and a load may overwrite blocks a kernel is
/// still reading, and nothing would report it. The sim and manual backends ignore both fields.
struct submit_options {
  void* wait_event = nullptr;
  bool no_dependency = false;
};

/// Memory standing for one GPU's KV cache, owned by the engine that allocated it.
struct device_buffer {
  void* data = nullptr;
  size_t bytes = 0;
};

class copy_engine {
 public:
  virtual ~copy_engine() = default;

  /// "sim", "cuda", or a decorator's name around its inner one.
  virtual std::string_view name() const noexcept = 0;

  /// Registers (pins) a host range the engine will copy to/from: the rank's pool region, made of
  /// slots of `slot_stride` bytes (0: the whole range is one slot). The cuda backend calls
  /// cudaHostRegister in chunks of at most 64 GiB that hold whole slots, so that no copy of one
  /// slot spans two registrations (a slot larger than a chunk is errc::invalid_argument), and
  /// refuses ops whose CPU side is not inside one chunk. The sim and manual backends record the
  /// range and check only that it overlaps no other.
  virtual status register_host(void* base, size_t bytes, size_t slot_stride = 0) = 0;
  /// Declares device memory not allocated by this engine that ops may touch: each KV tensor, once,
  /// when the KV caches are registered. The cuda backend checks here (cudaPointerGetAttributes)
  /// that the range is device memory of its device, and refuses ops whose GPU side is not inside
  /// a declared or allocated range; the sim and manual backends accept a range inside one buffer
  /// from allocate_device, or adopt host memory that overlaps none of theirs (an engine's CPU
  /// tensor standing in for GPU memory, e.g. kvconnect.vllm's tests). errc::invalid_argument
  /// otherwise.
  virtual status register_device(const void* base, size_t bytes) = 0;

  /// Allocates device memory (sim: host memory) freed with the engine.
  virtual result<device_buffer> allocate_device(size_t bytes) = 0;
  /// Synchronous helper copies between host memory and device memory (tests, set-up). They are
  /// not ordered against in-flight transfers: wait for those first.
  virtual status upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual status download(void* host_dst, const void* device_src, size_t bytes) = 0;

  /// Submits all ops as one transfer in one direction; returns at once. An empty op list is a
  /// valid transfer that completes in order. A refused submit (an error) leaves no copy of its ops
  /// in flight. When a device call fails after some of the ops were already queued, the submit
  /// still returns an id: the transfer stays pending until the queued copies finished, then reports
  /// failed, so that the caller never reuses memory a copy is still touching.
  virtual result<transfer_id> submit(direction dir, std::span<const copy_op> ops,
                                     const submit_options& opts = {}) = 0;
  /// State of a transfer not yet taken; unknown for ids never submitted or already taken.
  virtual poll_state poll(transfer_id id) = 0;
  /// Blocks until every listed transfer has finished (done or failed). Unknown ids are an
  /// error (errc::not_found) once every known one has finished. A transfer that failed is not
  /// an error of wait: poll / take_finished say how it ended. The cuda backend waits at most
  /// engine_options::wait_timeout, then answers errc::timeout and the transfers stay pending.
  virtual status wait(std::span<const transfer_id> ids) = 0;
  /// Reports of finished transfers not yet taken, each exactly once, FIFO per direction.
  virtual std::vector<transfer_report> take_finished() = 0;
  /// Transfers submitted as one batched device call (cuda: cudaMemcpyBatchAsync) rather than one
  /// call per op; 0 for backends that never batch.
  virtual uint64_t batched_transfers() const noexcept { return 0; }
  /// Transfers copied by one gather-kernel launch (cuda, engine_options::path); 0 for others.
  virtual uint64_t kernel_transfers() const noexcept { return 0; }
  /// Transfers the copy path gave the gather kernel that went by memcpy instead (cuda: every
  /// descriptor slot still read by a kernel in flight, or the launch failed); 0 for others.
  virtual uint64_t kernel_fallbacks() const noexcept { return 0; }
  /// ok while the device can take work; errc::device_unavailable, naming the cause, once it
  /// cannot (the cuda backend after a sticky CUDA error, the faulty decorator after an injected
  /// lose_device): every later submit fails without copying. Only a new process gets a new CUDA
  /// context, so the owner should report what finished and end the process for a restart. The
  /// sim and manual backends are always healthy.
  virtual status health() const { return {}; }
  /// The NUMA node nearest the device (the cuda backend reads its PCIe device's numa_node in
  /// sysfs), so that the owner can place the pool's pages there before faulting them in; -1 when
  /// unknown or meaningless (sim, manual).
  virtual int numa_node() const { return -1; }
};

}  // namespace kvc::cuda
