#include "cuda/kv_layout.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace kvc::cuda {

namespace {

constexpr uint64_t k_max = std::numeric_limits<uint64_t>::max();

/// a * b + c without overflow, or false.
bool mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t& out) {
  if (b != 0 && a > (k_max - c) / b) return false;
  out = a * b + c;
  return true;
}

struct dim_info {
  size_t index = 0;
  uint64_t size = 0;
  uint64_t stride = 0;
};

status tensor_error(errc code, size_t t, const std::string& what) {
  return make_error(code, "kv tensor " + std::to_string(t) + ": " + what);
}

/// Splits one tensor into regions; sets nb to its number of blocks.
status regions_of(const kv_tensor_desc& d, size_t t, std::vector<kv_region>& out, uint64_t& nb) {
  const size_t rank = d.shape.size();
  if (rank == 0 || d.strides.size() != rank) {
    return tensor_error(errc::invalid_argument, t,
                        "shape and strides must be non-empty and of "
                        "equal length");
  }
  if (d.block_dim < 0 || static_cast<size_t>(d.block_dim) >= rank) {
    return tensor_error(errc::invalid_argument, t,
                        "block_dim " + std::to_string(d.block_dim) + " out of range");
  }
  if (d.base == 0 || d.element_size == 0) {
    return tensor_error(errc::invalid_argument, t, "null base or zero element size");
  }
  for (size_t i = 0; i < rank; ++i) {
    if (d.shape[i] <= 0 || d.strides[i] < 0) {
      return tensor_error(errc::invalid_argument, t,
                          "dim " + std::to_string(i) + " has size " + std::to_string(d.shape[i]) +
                              " and stride " + std::to_string(d.strides[i]) +
                              " (sizes must be > 0, strides >= 0)");
    }
  }
  const size_t b = static_cast<size_t>(d.block_dim);
  nb = static_cast<uint64_t>(d.shape[b]);
  const uint64_t block_stride = static_cast<uint64_t>(d.strides[b]);
  if (block_stride == 0) return tensor_error(errc::layout_mismatch, t, "block stride is 0");

  std::vector<dim_info> dims;  // every dim but the block dim that has more than one index
  for (size_t i = 0; i < rank; ++i) {
    if (i == b || d.shape[i] == 1) continue;
    dims.push_back({i, static_cast<uint64_t>(d.shape[i]), static_cast<uint64_t>(d.strides[i])});
  }
  std::sort(dims.begin(), dims.end(),
            [](const dim_info& x, const dim_info& y) { return x.stride < y.stride; });

  // The page: the dense run of dims from element_size upwards that stays inside one block.
  uint64_t page = d.element_size;
  size_t k = 0;
  for (; k < dims.size() && dims[k].stride == page && dims[k].stride < block_stride; ++k) {
    if (!mul_add(page, dims[k].size, 0, page)) {
      return tensor_error(errc::invalid_argument, t, "size overflows");
    }
  }
  if (page > block_stride) {
    return tensor_error(errc::layout_mismatch, t,
                        "GPU blocks overlap: page of " + std::to_string(page) +
                            " bytes but block stride " + std::to_string(block_stride));
  }
  // The other dims must lie outside the whole block span, each outside the previous ones.
  uint64_t span = 0;
  if (!mul_add(nb - 1, block_stride, page, span)) {
    return tensor_error(errc::invalid_argument, t, "size overflows");
  }
  std::vector<dim_info> split(dims.begin() + static_cast<ptrdiff_t>(k), dims.end());
  for (const dim_info& s : split) {
    if (s.stride < block_stride) {
      return tensor_error(errc::layout_mismatch, t,
                          "bytes of one GPU block are not contiguous: dim " +
                              std::to_string(s.index) + " (size " + std::to_string(s.size) +
                              ", stride " + std::to_string(s.stride) + ") expected stride " +
                              std::to_string(page));
    }
    if (s.stride < span) {
      return tensor_error(errc::layout_mismatch, t,
                          "dim " + std::to_string(s.index) + " (stride " +
                              std::to_string(s.stride) + ") overlaps the blocks (span " +
                              std::to_string(span) + " bytes)");
    }
    if (!mul_add(s.size - 1, s.stride, span, span)) {
      return tensor_error(errc::invalid_argument, t, "size overflows");
    }
  }
  if (d.base > k_max - span) return tensor_error(errc::invalid_argument, t, "address overflows");

  // One region per index combination of the split dims, in logical (row-major) order.
  std::sort(split.begin(), split.end(),
            [](const dim_info& x, const dim_info& y) { return x.index < y.index; });
  std::vector<uint64_t> idx(split.size(), 0);
  for (;;) {
    uintptr_t base = d.base;
    for (size_t i = 0; i < split.size(); ++i) base += idx[i] * split[i].stride;
    out.push_back(kv_region{base, block_stride, page});
    size_t i = split.size();
    while (i > 0 && ++idx[i - 1] == split[i - 1].size) idx[--i] = 0;
    if (i == 0) break;
  }
  return {};
}

/// Drops repeated regions and merges a region that continues the previous one in every block.
std::vector<kv_region> canonical(std::vector<kv_region> in) {
  std::vector<kv_region> out;
  for (const kv_region& r : in) {
    if (std::find(out.begin(), out.end(), r) != out.end()) continue;
    if (!out.empty()) {
      kv_region& last = out.back();
      if (last.block_stride == r.block_stride && r.base == last.base + last.page_bytes &&
          last.page_bytes + r.page_bytes <= r.block_stride) {
        last.page_bytes += r.page_bytes;
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace

kv_layout::kv_layout(std::vector<kv_region> regions, uint64_t num_blocks)
    : regions_(std::move(regions)), num_blocks_(num_blocks) {
  offsets_.reserve(regions_.size());
  for (const kv_region& r : regions_) {
    offsets_.push_back(block_bytes_);
    block_bytes_ += r.page_bytes;
  }
}

result<kv_layout> kv_layout::from_tensors(std::span<const kv_tensor_desc> tensors) {
  if (tensors.empty()) return make_error(errc::invalid_argument, "kv layout: no tensors");
  std::vector<kv_region> regions;
  uint64_t num_blocks = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    uint64_t nb = 0;
    if (status s = regions_of(tensors[t], t, regions, nb); !s) return s;
    if (t > 0 && nb != num_blocks) {
      return tensor_error(
          errc::layout_mismatch, t,
          "has " + std::to_string(nb) + " blocks, tensor 0 has " + std::to_string(num_blocks));
    }
    num_blocks = nb;
  }
  return kv_layout(canonical(std::move(regions)), num_blocks);
}

result<kv_layout> kv_layout::from_regions(std::vector<kv_region> regions, uint64_t num_blocks) {
  if (regions.empty() || num_blocks == 0) {
    return make_error(errc::invalid_argument, "kv layout: no regions or zero blocks");
  }
  for (size_t i = 0; i < regions.size(); ++i) {
    const kv_region& r = regions[i];
    uint64_t end = 0;
    if (r.base == 0 || r.page_bytes == 0 || r.page_bytes > r.block_stride ||
        !mul_add(num_blocks - 1, r.block_stride, r.page_bytes, end) || r.base > k_max - end) {
      return make_error(errc::layout_mismatch,
                        "kv region " + std::to_string(i) +
                            ": needs a base, 0 < page_bytes <= block_stride, and no overflow");
    }
  }
  return kv_layout(canonical(std::move(regions)), num_blocks);
}

result<std::vector<copy_op>> kv_layout::build_ops(const kv_transfer_spec& spec) const {
  const uint64_t factor = spec.block_size_factor;
  if (factor == 0) return make_error(errc::invalid_argument, "kv ops: block_size_factor is 0");
  const uint64_t slot_bytes = factor * block_bytes_;
  uint64_t pool_end = 0;
  if (spec.cpu.base == 0 || spec.cpu.slot_stride < slot_bytes ||
      !mul_add(spec.cpu.num_slots, spec.cpu.slot_stride, 0, pool_end) ||
      spec.cpu.base > k_max - pool_end) {
    return make_error(errc::invalid_argument, "kv ops: CPU slots need a base and slot_stride >= " +
                                                  std::to_string(slot_bytes) + " bytes (factor " +
                                                  std::to_string(factor) + "), got stride " +
                                                  std::to_string(spec.cpu.slot_stride));
  }
  const uint64_t skip = spec.block_index % factor;
  const uint64_t m = spec.cpu_slot_ids.size();
  const uint64_t n = spec.gpu_block_ids.size();
  if (m == 0 ? n != 0 : n != m * factor - skip) {
    return make_error(errc::invalid_argument,
                      "kv ops: " + std::to_string(n) + " GPU blocks do not fill " +
                          std::to_string(m) + " CPU blocks of factor " + std::to_string(factor) +
                          " skipping " + std::to_string(skip));
  }
  for (int64_t s : spec.cpu_slot_ids) {
    if (s < 0 || static_cast<uint64_t>(s) >= spec.cpu.num_slots) {
      return make_error(errc::invalid_argument, "kv ops: CPU slot " + std::to_string(s) +
                                                    " out of range [0, " +
                                                    std::to_string(spec.cpu.num_slots) + ")");
    }
  }
  for (int64_t g : spec.gpu_block_ids) {
    if (g < 0 || static_cast<uint64_t>(g) >= num_blocks_) {
      return make_error(errc::invalid_argument, "kv ops: GPU block " + std::to_string(g) +
                                                    " out of range [0, " +
                                                    std::to_string(num_blocks_) + ")");
    }
  }

  std::vector<copy_op> ops;
  ops.reserve(n * regions_.size());
  const bool store = spec.dir == direction::gpu_to_cpu;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t sub = skip + k;
    const uint64_t slot = static_cast<uint64_t>(spec.cpu_slot_ids[sub / factor]);
    const uintptr_t cpu_block =
        spec.cpu.base + slot * spec.cpu.slot_stride + (sub % factor) * block_bytes_;
    const uint64_t gpu_block = static_cast<uint64_t>(spec.gpu_block_ids[k]);
    for (size_t i = 0; i < regions_.size(); ++i) {
      const kv_region& r = regions_[i];
      auto* gpu = reinterpret_cast<std::byte*>(r.base + gpu_block * r.block_stride);
      auto* cpu = reinterpret_cast<std::byte*>(cpu_block + offsets_[i]);
      copy_op op{store ? gpu : cpu, store ? cpu : gpu, r.page_bytes};
      if (!ops.empty()) {
        copy_op& last = ops.back();
        if (static_cast<const std::byte*>(last.src) + last.bytes == op.src &&
            static_cast<std::byte*>(last.dst) + last.bytes == op.dst) {
          last.bytes += op.bytes;
          continue;
        }
      }
      ops.push_back(op);
    }
  }
  return ops;
}

}  // namespace kvc::cuda
