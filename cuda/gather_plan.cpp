#include "cuda/gather_plan.hpp"

#include <algorithm>
#include <string>

namespace kvc::cuda {

std::string_view to_string(copy_path p) noexcept {
  switch (p) {
    case copy_path::memcpy:
      return "memcpy";
    case copy_path::kernel:
      return "kernel";
    case copy_path::auto_select:
      return "auto";
  }
  return "unknown_copy_path";
}

result<copy_path> parse_copy_path(std::string_view text) {
  for (copy_path p : {copy_path::memcpy, copy_path::kernel, copy_path::auto_select}) {
    if (text == to_string(p)) return p;
  }
  return make_error(errc::invalid_argument, "copy path \"" + std::string(text) +
                                                "\": expected memcpy, kernel or auto");
}

size_t gather_desc_count(std::span<const copy_op> ops, size_t chunk_bytes) noexcept {
  size_t n = 0;
  for (const copy_op& op : ops) n += (op.bytes + chunk_bytes - 1) / chunk_bytes;
  return n;
}

bool takes_gather(copy_path path, std::span<const copy_op> ops,
                  const gather_limits& limits) noexcept {
  if (path == copy_path::memcpy || ops.empty() || ops.size() > limits.max_ops) return false;
  if (gather_desc_count(ops, limits.chunk_bytes) > limits.max_ops) return false;
  if (path == copy_path::kernel) return true;
  if (ops.size() < 2) return false;
  for (const copy_op& op : ops) {
    if (op.bytes > limits.auto_max_op_bytes) return false;
  }
  return true;
}

size_t fill_gather_descs(std::span<const copy_op> ops, std::span<gather_desc> out,
                         size_t chunk_bytes) noexcept {
  size_t n = 0;
  for (const copy_op& op : ops) {
    const auto src = reinterpret_cast<uint64_t>(op.src);
    const auto dst = reinterpret_cast<uint64_t>(op.dst);
    for (uint64_t off = 0; off < op.bytes && n < out.size(); off += chunk_bytes) {
      out[n++] = {src + off, dst + off, std::min<uint64_t>(chunk_bytes, op.bytes - off)};
    }
  }
  return n;
}

}  // namespace kvc::cuda
