#pragma once
/// sim_device_memory: host memory standing in for one GPU's memory, shared by the host-only
/// copy_engine backends (sim, manual). It allocates the "device" buffers, does the synchronous
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
  /// ok when [base, base + bytes) lies inside one allocated buffer (a KV tensor carved out of
  /// it); errc::invalid_argument otherwise.
  status register_device(const void* base, size_t bytes) const;
  /// validate_ops, then the placement checks above; errc::invalid_argument naming the op.
  status check_ops(direction dir, std::span<const copy_op> ops) const;

 private:
  std::vector<std::unique_ptr<std::byte[]>> storage_;
  address_range_set device_;
  address_range_set host_;
};

}  // namespace kvc::cuda
