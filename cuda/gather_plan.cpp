#include "cuda/gather_plan.hpp"

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

bool takes_gather(copy_path path, std::span<const copy_op> ops,
                  const gather_limits& limits) noexcept {
  if (path == copy_path::memcpy || ops.empty() || ops.size() > limits.max_ops) return false;
  if (path == copy_path::kernel) return true;
  if (ops.size() < 2) return false;
  for (const copy_op& op : ops) {
    if (op.bytes > limits.auto_max_op_bytes) return false;
  }
  return true;
}

void fill_gather_descs(std::span<const copy_op> ops, std::span<gather_desc> out) noexcept {
  for (size_t i = 0; i < ops.size() && i < out.size(); ++i) {
    out[i] = {reinterpret_cast<uint64_t>(ops[i].src), reinterpret_cast<uint64_t>(ops[i].dst),
              ops[i].bytes};
  }
}

}  // namespace kvc::cuda
