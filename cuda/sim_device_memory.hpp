#pragma once
/// sim_device_memory: host memory standing in for one GPU's memory, shared by the host-only
/// copy_engine backends (sim, manual). It allocates the "device" buffers (or adopts the
/// caller's, register_device), does the synchronous
/// upload/download helpers, records registered host ranges, and checks where a transfer's ops
/// point: the GPU side must lie inside one allocated buffer and the CPU side must not touch
/// one. On a GPU such an op would fault or silently corrupt memory; the host-only backends are
/// where the op builders are tested, so they refuse it.
///
/// Ownership: owns the buffers; they live as long as this object. Not thread-safe: the engine's
/// owner thread calls it (the sim's copy threads never do: they copy ops already checked).
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "cuda/address_range_set.hpp"
#include "cuda/copy_engine.hpp"
#include "proto/status.hpp"

namespace kvc::cuda {

class sim_device_memory {
 public:
  /// Memory is filled with 0xCD so that reading it before writing shows up in tests.
  result<device_buffer> allocate(size_t bytes);
  /// Like cudaMemcpy: the device side must lie inside one buffer, the host side must be non-null.
  status upload(void* device_dst, const void* host_src, size_t bytes) const;
  status download(void* host_dst, const void* device_src, size_t bytes) const;
  /// Records a host range; a null base, zero bytes or an overlap with a range already
  /// registered is errc::invalid_argument.
  status register_host(void* base, size_t bytes);
  /// ok when [base, base + bytes) lies inside one device buffer (a KV tensor carved out of
  /// it). A range that overlaps no device buffer and no registered host range is the caller's
  /// host memory standing in for GPU memory (an engine's CPU tensor): it is adopted as a device
  /// buffer (borrowed: the caller keeps it alive while the engine lives). A partial overlap, a
  /// null base or zero bytes is errc::invalid_argument.
  status register_device(const void* base, size_t bytes);
  /// validate_ops, then the placement checks above; errc::invalid_argument naming the op.
  status check_ops(direction dir, std::span<const copy_op> ops) const;

 private:
  std::vector<std::unique_ptr<std::byte[]>> storage_;
  address_range_set device_;
  address_range_set host_;
};

/// host_memory_engine: what the host-only backends (sim, manual) share as copy engines: device
/// memory is a sim_device_memory, and the five memory calls go to it; they differ only in how a
/// transfer runs. Same ownership and thread-safety as sim_device_memory.
class host_memory_engine : public copy_engine {
 public:
  /// Records the range (sim_device_memory::register_host); the slot stride does not matter.
  status register_host(void* base, size_t bytes, size_t slot_stride = 0) override {
    return memory_.register_host(base, bytes);
  }
  status register_device(const void* base, size_t bytes) override {
    return memory_.register_device(base, bytes);
  }
  /// Memory is filled with 0xCD so that reading it before writing shows up in tests.
  result<device_buffer> allocate_device(size_t bytes) override { return memory_.allocate(bytes); }
  status upload(void* device_dst, const void* host_src, size_t bytes) override {
    return memory_.upload(device_dst, host_src, bytes);
  }
  status download(void* host_dst, const void* device_src, size_t bytes) override {
    return memory_.download(host_dst, device_src, bytes);
  }

 protected:
  /// The report of a transfer that copied its `bytes` in `seconds`.
  static transfer_report done_report(transfer_id id, direction dir, uint64_t bytes,
                                     double seconds = 0.0) {
    transfer_report r;
    r.id = id;
    r.dir = dir;
    r.ok = true;
    r.bytes = bytes;
    r.seconds = seconds;
    return r;
  }

  sim_device_memory memory_;  ///< owner thread only
};

}  // namespace kvc::cuda
