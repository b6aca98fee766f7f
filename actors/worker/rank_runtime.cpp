#include "actors/worker/rank_runtime.hpp"

#include <limits>
#include <utility>

namespace kvc::worker {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

status validate(const synthetic_kv_spec& kv) {
  if (kv.layers == 0 || kv.page_bytes == 0 || kv.block_factor == 0) {
    return make_error(errc::invalid_argument,
                      "kv cache: layers, page bytes and block factor "
                      "must be >= 1");
  }
  if (kv.gpu_blocks < 2) {
    return make_error(errc::invalid_argument,
                      "kv cache: gpu blocks must be >= 2 (block 0 is "
                      "the null block)");
  }
  constexpr uint64_t max = std::numeric_limits<uint64_t>::max();
  if (kv.page_bytes > max / kv.gpu_blocks ||
      kv.page_bytes > max / (uint64_t{kv.layers} * kv.block_factor)) {
    return make_error(errc::invalid_argument, "kv cache: sizes overflow");
  }
  return status::success();
}

std::byte kv_pattern(rank_id rank, uint32_t layer, gpu_block block, uint64_t offset) noexcept {
  const uint64_t h = splitmix64((uint64_t{rank} << 48) ^ (uint64_t{layer} << 32) ^ block);
  return static_cast<std::byte>(static_cast<uint8_t>(h >> ((offset & 7) * 8)) ^
                                static_cast<uint8_t>(offset >> 3));
}

rank_runtime::~rank_runtime() = default;

result<std::unique_ptr<rank_runtime>> rank_runtime::open(const rank_runtime_options& opts) {
  if (auto st = validate(opts.kv); !st) return st;
  if (opts.kv.slot_bytes() > opts.geometry.slot_bytes) {
    return make_error(errc::layout_mismatch, "kv cache: an offloaded block needs " +
                                                 std::to_string(opts.kv.slot_bytes()) +
                                                 " bytes, the pool's slots hold " +
                                                 std::to_string(opts.geometry.slot_bytes));
  }
  auto engine = cuda::make_copy_engine(opts.engine);
  if (!engine) return engine.error();
  auto seg = shm::segment::attach(opts.segment, &opts.geometry);
  if (!seg) return seg.error();
  if (opts.prefault) {
    if (auto st = seg->prefault_rank(opts.rank); !st) return st;
  }
  std::unique_ptr<rank_runtime> rt{new rank_runtime()};
  rt->kv_ = opts.kv;
  rt->engine_ = std::move(engine).value();
  rt->segment_.emplace(std::move(seg).value());
  const auto region = rt->segment_->rank_region(opts.rank);
  if (region.empty()) {
    return make_error(errc::invalid_argument,
                      "rank " + std::to_string(opts.rank) + " has no region in " + opts.segment);
  }
  return build(std::move(rt), opts.rank,
               {region.data(), opts.geometry.slot_stride(), opts.geometry.num_slots});
}

result<std::unique_ptr<rank_runtime>> rank_runtime::over_region(
    rank_id rank, const synthetic_kv_spec& kv, std::unique_ptr<cuda::copy_engine> engine,
    cpu_pool_region region) {
  if (auto st = validate(kv); !st) return st;
  if (!engine) return make_error(errc::invalid_argument, "rank_runtime: no copy engine");
  std::unique_ptr<rank_runtime> rt{new rank_runtime()};
  rt->kv_ = kv;
  rt->engine_ = std::move(engine);
  return build(std::move(rt), rank, region);
}

result<std::unique_ptr<rank_runtime>> rank_runtime::build(std::unique_ptr<rank_runtime> rt,
                                                          rank_id rank, cpu_pool_region region) {
  const synthetic_kv_spec& kv = rt->kv_;
  const uint64_t layer_bytes = kv.page_bytes * kv.gpu_blocks;
  std::vector<std::byte> init(layer_bytes);
  std::vector<cuda::kv_tensor_desc> descs;
  for (uint32_t l = 0; l < kv.layers; ++l) {
    auto buf = rt->engine_->allocate_device(layer_bytes);
    if (!buf) return buf.error();
    rt->layers_.push_back(*buf);
    for (gpu_block b = 0; b < kv.gpu_blocks; ++b) {
      for (uint64_t i = 0; i < kv.page_bytes; ++i) {
        init[b * kv.page_bytes + i] = kv_pattern(rank, l, b, i);
      }
    }
    if (auto st = rt->engine_->upload(buf->data, init.data(), layer_bytes); !st) return st;
    descs.push_back({.base = reinterpret_cast<uintptr_t>(buf->data),
                     .shape = {int64_t{kv.gpu_blocks}, static_cast<int64_t>(kv.page_bytes)},
                     .strides = {static_cast<int64_t>(kv.page_bytes), 1},
                     .element_size = 1,
                     .block_dim = 0});
  }
  auto w = connector_worker::create(
      {.rank = rank, .block_size_factor = kv.block_factor, .pool = region}, *rt->engine_);
  if (!w) return w.error();
  rt->worker_.emplace(std::move(w).value());
  if (auto st = rt->worker_->register_kv_caches(descs); !st) return st;
  return rt;
}

result<std::vector<std::byte>> rank_runtime::read_gpu_page(uint32_t layer, gpu_block block) {
  if (layer >= layers_.size() || block >= kv_.gpu_blocks) {
    return make_error(errc::invalid_argument, "read_gpu_page: layer or block out of range");
  }
  std::vector<std::byte> out(kv_.page_bytes);
  const auto* src = static_cast<const std::byte*>(layers_[layer].data) + block * kv_.page_bytes;
  if (auto st = engine_->download(out.data(), src, kv_.page_bytes); !st) return st;
  return out;
}

}  // namespace kvc::worker
