#include "cuda/op_validator.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace kvc::cuda {

namespace {

uintptr_t addr(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace

status validate_ops(std::span<const copy_op> ops) {
  for (size_t k = 0; k < ops.size(); ++k) {
    const copy_op& op = ops[k];
    const std::string where = "copy op " + std::to_string(k) + ": ";
    if (op.src == nullptr || op.dst == nullptr) {
      return make_error(errc::invalid_argument, where + "null source or destination pointer");
    }
    if (op.bytes == 0) return make_error(errc::invalid_argument, where + "zero bytes");
    if (addr(op.src) > UINTPTR_MAX - op.bytes || addr(op.dst) > UINTPTR_MAX - op.bytes) {
      return make_error(errc::invalid_argument, where + "range wraps the address space");
    }
    if (addr(op.src) < addr(op.dst) + op.bytes && addr(op.dst) < addr(op.src) + op.bytes) {
      return make_error(errc::invalid_argument, where + "source overlaps its destination");
    }
  }
  if (ops.size() < 2) return {};
  std::vector<size_t> order(ops.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return addr(ops[a].dst) < addr(ops[b].dst); });
  for (size_t i = 1; i < order.size(); ++i) {
    const copy_op& prev = ops[order[i - 1]];
    const copy_op& cur = ops[order[i]];
    if (addr(cur.dst) < addr(prev.dst) + prev.bytes) {
      return make_error(errc::invalid_argument, "copy ops " + std::to_string(order[i - 1]) +
                                                    " and " + std::to_string(order[i]) +
                                                    " write overlapping destinations");
    }
  }
  return {};
}

uint64_t total_bytes(std::span<const copy_op> ops) noexcept {
  uint64_t sum = 0;
  for (const copy_op& op : ops) sum += op.bytes;
  return sum;
}

}  // namespace kvc::cuda
