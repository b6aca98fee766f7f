#include "cuda/op_validator.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

namespace kvc::cuda {

namespace {

uintptr_t addr(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p);
}

// Error paths only: these build the message.
status op_error(size_t k, std::string_view what) {
  return make_error(errc::invalid_argument,
                    "copy op " + std::to_string(k) + ": " + std::string(what));
}

status op_error(size_t k, direction dir, std::string_view what) {
  return make_error(errc::invalid_argument, "copy op " + std::to_string(k) + " (" +
                                                std::string(to_string(dir)) +
                                                "): " + std::string(what));
}

status overlap_error(size_t a, size_t b) {
  return make_error(errc::invalid_argument, "copy ops " + std::to_string(a) + " and " +
                                                std::to_string(b) +
                                                " write overlapping destinations");
}

bool dst_ascending(std::span<const copy_op> ops) noexcept {
  for (size_t i = 1; i < ops.size(); ++i) {
    if (addr(ops[i].dst) < addr(ops[i - 1].dst)) return false;
  }
  return true;
}

}  // namespace

status validate_ops(std::span<const copy_op> ops) {
  return op_checker{}.validate(ops);
}

status op_checker::validate(std::span<const copy_op> ops) {
  for (size_t k = 0; k < ops.size(); ++k) {
    const copy_op& op = ops[k];
    if (op.src == nullptr || op.dst == nullptr) {
      return op_error(k, "null source or destination pointer");
    }
    if (op.bytes == 0) return op_error(k, "zero bytes");
    if (addr(op.src) > UINTPTR_MAX - op.bytes || addr(op.dst) > UINTPTR_MAX - op.bytes) {
      return op_error(k, "range wraps the address space");
    }
    if (addr(op.src) < addr(op.dst) + op.bytes && addr(op.dst) < addr(op.src) + op.bytes) {
      return op_error(k, "source overlaps its destination");
    }
  }
  if (ops.size() < 2) return {};
  if (dst_ascending(ops)) {
    for (size_t i = 1; i < ops.size(); ++i) {
      if (addr(ops[i].dst) < addr(ops[i - 1].dst) + ops[i - 1].bytes)
        return overlap_error(i - 1, i);
    }
    return {};
  }
  const bool equal_sized = std::all_of(ops.begin(), ops.end(),
                                       [&](const copy_op& op) { return op.bytes == ops[0].bytes; });
  // Below about a thousand ops sorting is as fast (measured: docs/benchmarks.md "Op checks").
  if (equal_sized && ops.size() >= hash_from_ops && ops.size() < UINT32_MAX) {
    return check_equal_sized(ops);
  }
  return check_sorted(ops);
}

status op_checker::check_equal_sized(std::span<const copy_op> ops) {
  const uintptr_t size = ops[0].bytes;
  size_t capacity = 16;
  while (capacity < 2 * ops.size()) capacity *= 2;
  table_.assign(capacity, slot{});  // reuses the storage once it is large enough
  const size_t mask = capacity - 1;
  auto home = [&](uintptr_t bucket) {
    return static_cast<size_t>((bucket * 0x9E3779B97F4A7C15ull) >> 20) & mask;
  };
  auto find = [&](uintptr_t bucket) -> uint32_t {
    for (size_t i = home(bucket);; i = (i + 1) & mask) {
      if (table_[i].op == UINT32_MAX) return UINT32_MAX;
      if (table_[i].bucket == bucket) return table_[i].op;
    }
  };
  for (size_t k = 0; k < ops.size(); ++k) {
    const uintptr_t dst = addr(ops[k].dst);
    const uintptr_t bucket = dst / size;
    for (uintptr_t near : {bucket - 1, bucket, bucket + 1}) {
      const uint32_t j = find(near);
      if (j == UINT32_MAX) continue;
      const uintptr_t other = addr(ops[j].dst);
      if (other < dst + size && dst < other + size) return overlap_error(j, k);
    }
    size_t i = home(bucket);
    while (table_[i].op != UINT32_MAX) i = (i + 1) & mask;
    table_[i] = {bucket, static_cast<uint32_t>(k)};
  }
  return {};
}

status op_checker::check_sorted(std::span<const copy_op> ops) {
  order_.resize(ops.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  std::sort(order_.begin(), order_.end(),
            [&](size_t a, size_t b) { return addr(ops[a].dst) < addr(ops[b].dst); });
  for (size_t i = 1; i < order_.size(); ++i) {
    const copy_op& prev = ops[order_[i - 1]];
    const copy_op& cur = ops[order_[i]];
    if (addr(cur.dst) < addr(prev.dst) + prev.bytes) {
      return overlap_error(std::min(order_[i - 1], order_[i]), std::max(order_[i - 1], order_[i]));
    }
  }
  return {};
}

status check_placement(direction dir, std::span<const copy_op> ops, const address_range_set& host,
                       const address_range_set& device) {
  for (size_t k = 0; k < ops.size(); ++k) {
    const copy_op& op = ops[k];
    const void* gpu = dir == direction::gpu_to_cpu ? op.src : op.dst;
    const void* cpu = dir == direction::gpu_to_cpu ? op.dst : op.src;
    const bool gpu_ok = device.contains(gpu, op.bytes);
    const bool cpu_ok = host.contains(cpu, op.bytes);
    if (gpu_ok && cpu_ok) continue;
    if (device.contains(cpu, op.bytes) && host.contains(gpu, op.bytes)) {
      return op_error(k, dir, "source and destination are swapped for this direction");
    }
    if (!gpu_ok) {
      return op_error(k, dir, "GPU side is not inside one allocated or registered device range");
    }
    return op_error(k, dir, "CPU side is not inside one registered (pinned) host chunk");
  }
  return {};
}

status check_ordering(const submit_options& opts) {
  if (opts.wait_event != nullptr || opts.no_dependency) return {};
  return make_error(errc::invalid_argument,
                    "submit: no wait_event; pass the compute stream's event recorded after the "
                    "kernels touching these blocks, or no_dependency when no device work does");
}

uint64_t total_bytes(std::span<const copy_op> ops) noexcept {
  uint64_t sum = 0;
  for (const copy_op& op : ops) sum += op.bytes;
  return sum;
}

}  // namespace kvc::cuda
