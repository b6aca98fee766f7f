#include "cuda/sim_device_memory.hpp"

#include <cstring>
#include <new>
#include <string>

#include "cuda/op_validator.hpp"

namespace kvc::cuda {

result<device_buffer> sim_device_memory::allocate(size_t bytes) {
  if (bytes == 0) return make_error(errc::invalid_argument, "allocate_device: zero bytes");
  auto storage = std::unique_ptr<std::byte[]>(new (std::nothrow) std::byte[bytes]);
  if (!storage) {
    return make_error(errc::capacity_exhausted,
                      "allocate_device: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(storage.get(), 0xCD, bytes);
  if (status s = device_.insert(reinterpret_cast<uintptr_t>(storage.get()), bytes); !s) {
    return make_error(errc::internal, "allocate_device: " + s.message());
  }
  device_buffer buf{storage.get(), bytes};
  storage_.push_back(std::move(storage));
  return buf;
}

status sim_device_memory::upload(void* device_dst, const void* host_src, size_t bytes) const {
  if (host_src == nullptr || !device_.contains(device_dst, bytes)) {
    return make_error(errc::invalid_argument,
                      "upload: destination is not inside one device buffer or source is null");
  }
  std::memcpy(device_dst, host_src, bytes);
  return {};
}

status sim_device_memory::download(void* host_dst, const void* device_src, size_t bytes) const {
  if (host_dst == nullptr || !device_.contains(device_src, bytes)) {
    return make_error(errc::invalid_argument,
                      "download: source is not inside one device buffer or destination is null");
  }
  std::memcpy(host_dst, device_src, bytes);
  return {};
}

status sim_device_memory::register_host(void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return make_error(errc::invalid_argument, "register_host: null base or zero bytes");
  }
  if (status s = host_.insert(reinterpret_cast<uintptr_t>(base), bytes); !s) {
    return make_error(errc::invalid_argument, "register_host: " + s.message());
  }
  return {};
}

status sim_device_memory::register_device(const void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return make_error(errc::invalid_argument, "register_device: null base or zero bytes");
  }
  if (device_.contains(base, bytes)) return {};  // a KV tensor carved out of a buffer
  if (device_.overlaps(base, bytes) || host_.overlaps(base, bytes)) {
    return make_error(errc::invalid_argument,
                      "register_device: range overlaps a device buffer or a registered host "
                      "range without lying inside one device buffer");
  }
  // The engine's own host memory (a CPU tensor standing in for GPU memory): adopted as device
  // memory, borrowed, until the engine ends.
  if (status s = device_.insert(reinterpret_cast<uintptr_t>(base), bytes); !s) {
    return make_error(errc::invalid_argument, "register_device: " + s.message());
  }
  return {};
}

status sim_device_memory::check_ops(direction dir, std::span<const copy_op> ops) const {
  if (status s = validate_ops(ops); !s) return s;
  for (size_t k = 0; k < ops.size(); ++k) {
    const copy_op& op = ops[k];
    const void* gpu = dir == direction::gpu_to_cpu ? op.src : op.dst;
    const void* cpu = dir == direction::gpu_to_cpu ? op.dst : op.src;
    if (!device_.contains(gpu, op.bytes)) {
      return make_error(errc::invalid_argument,
                        "copy op " + std::to_string(k) + " (" + std::string(to_string(dir)) +
                            "): GPU side is not inside one allocated device buffer");
    }
    if (device_.overlaps(cpu, op.bytes)) {
      return make_error(errc::invalid_argument, "copy op " + std::to_string(k) + " (" +
                                                    std::string(to_string(dir)) +
                                                    "): CPU side points into device memory");
    }
  }
  return {};
}

}  // namespace kvc::cuda
