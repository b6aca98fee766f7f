#include "launch/engines/smoke/synthetic_kv.hpp"

#include <new>
#include <stdexcept>
#include <string>

namespace kvc::launch {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::byte kv_pattern(rank_id rank, uint32_t layer, gpu_block block, uint64_t offset) noexcept {
  const uint64_t h = splitmix64((uint64_t{rank} << 48) ^ (uint64_t{layer} << 32) ^ block);
  return static_cast<std::byte>(static_cast<uint8_t>(h >> ((offset & 7) * 8)) ^
                                static_cast<uint8_t>(offset >> 3));
}

namespace {

status install(embed::worker_connector& wc, const synthetic_kv_spec& kv) {
  if (auto st = validate(kv); !st) return st;
  cuda::copy_engine& engine = wc.copy_engine();
  const uint64_t layer_bytes = kv.page_bytes * kv.gpu_blocks;
  std::vector<std::byte> init(layer_bytes);
  std::vector<cuda::kv_tensor_desc> descs;
  for (uint32_t l = 0; l < kv.layers; ++l) {
    auto buf = engine.allocate_device(layer_bytes);
    if (!buf) return buf.error();
    for (gpu_block b = 0; b < kv.gpu_blocks; ++b) {
      for (uint64_t i = 0; i < kv.page_bytes; ++i) {
        init[b * kv.page_bytes + i] = kv_pattern(wc.rank(), l, b, i);
      }
    }
    if (auto st = engine.upload(buf->data, init.data(), layer_bytes); !st) return st;
    descs.push_back({.base = reinterpret_cast<uintptr_t>(buf->data),
                     .shape = {int64_t{kv.gpu_blocks}, static_cast<int64_t>(kv.page_bytes)},
                     .strides = {static_cast<int64_t>(kv.page_bytes), 1},
                     .element_size = 1,
                     .block_dim = 0});
  }
  return wc.register_kv_caches(descs);
}

std::string too_big(const synthetic_kv_spec& kv) {
  return "kv cache: cannot allocate " + std::to_string(kv.layers) + " layers of " +
         std::to_string(kv.gpu_blocks) + " blocks of " + std::to_string(kv.page_bytes) + " bytes";
}

}  // namespace

status install_synthetic_kv(embed::worker_connector& wc, const synthetic_kv_spec& kv) {
  try {
    return install(wc, kv);
  } catch (const std::bad_alloc&) {
    return make_error(errc::capacity_exhausted, too_big(kv));
  } catch (const std::length_error&) {  // a size no vector can have
    return make_error(errc::capacity_exhausted, too_big(kv));
  }
}

}  // namespace kvc::launch
