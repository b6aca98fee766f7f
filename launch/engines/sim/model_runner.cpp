#include "launch/engines/sim/model_runner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "launch/engines/sim/elapsed.hpp"
#include "launch/engines/sim/kv_content.hpp"

namespace kvc::sim {

namespace {

constexpr size_t mismatches_kept = 8;

using steady = std::chrono::steady_clock;

}  // namespace

result<model_runner> model_runner::create(cuda::copy_engine& engine, embed::worker_connector* wc,
                                          rank_id rank, const runner_geometry& g) {
  if (g.layers == 0 || g.gpu_blocks < 2 || g.gpu_block_size == 0 || g.page_bytes == 0 ||
      (g.kv_planes != 1 && g.kv_planes != 2) ||
      g.page_bytes % (uint64_t{g.gpu_block_size} * g.kv_planes) != 0) {
    return make_error(errc::invalid_argument,
                      "model runner: layers, gpu blocks (>= 2), 1 or 2 "
                      "planes and a page of whole tokens needed");
  }
  const auto page = static_cast<int64_t>(g.page_bytes / g.kv_planes);  // of one plane
  const int64_t plane = page * g.gpu_blocks;
  std::vector<std::byte*> layers;
  std::vector<cuda::kv_tensor_desc> descs;
  for (uint32_t l = 0; l < g.layers; ++l) {
    auto buf = engine.allocate_device(g.page_bytes * g.gpu_blocks);
    if (!buf) return buf.error();
    layers.push_back(static_cast<std::byte*>(buf->data));
    cuda::kv_tensor_desc d{.base = reinterpret_cast<uintptr_t>(buf->data),
                           .shape = {int64_t{g.gpu_blocks}, page},
                           .strides = {page, 1},
                           .element_size = 1,
                           .block_dim = 0};
    if (g.kv_planes == 2) {
      d.shape.insert(d.shape.begin(), 2);
      d.strides.insert(d.strides.begin(), plane);
      d.block_dim = 1;
    }
    descs.push_back(std::move(d));
  }
  if (wc != nullptr) {
    if (auto st = wc->register_kv_caches(descs); !st) return st;
  }
  return model_runner{engine, wc, rank, g, std::move(layers)};
}

model_runner::model_runner(cuda::copy_engine& engine, embed::worker_connector* wc, rank_id rank,
                           const runner_geometry& g, std::vector<std::byte*> layers)
    : engine_(&engine),
      wc_(wc),
      rank_(rank),
      g_(g),
      token_bytes_(g.page_bytes / g.kv_planes / g.gpu_block_size),
      plane_bytes_(g.page_bytes / g.kv_planes * g.gpu_blocks),
      layers_(std::move(layers)) {}

std::byte* model_runner::slot_ptr(uint32_t layer, uint32_t plane, gpu_block b,
                                  uint32_t slot) const {
  return layers_[layer] + plane * plane_bytes_ +
         (uint64_t{b} * g_.gpu_block_size + slot) * token_bytes_;
}

status model_runner::forward(const model_input& in) {
  // Consecutive slots of one block go up in one upload per layer.
  const auto& w = in.writes;
  for (size_t i = 0; i < w.size();) {
    size_t j = i + 1;
    while (j < w.size() && w[j].block == w[i].block && w[j].slot == w[j - 1].slot + 1) ++j;
    const size_t n = j - i;
    buf_.resize(n * token_bytes_);
    for (uint32_t l = 0; l < g_.layers; ++l) {
      for (uint32_t p = 0; p < g_.kv_planes; ++p) {
        for (size_t k = 0; k < n; ++k) {
          token_kv(w[i + k].hash, l * g_.kv_planes + p, rank(),
                   {buf_.data() + k * token_bytes_, token_bytes_});
        }
        if (auto st =
                engine_->upload(slot_ptr(l, p, w[i].block, w[i].slot), buf_.data(), buf_.size());
            !st) {
          return st;
        }
      }
    }
    stats_.tokens_written += n;
    i = j;
  }
  return status::success();
}

std::string model_runner::differs(uint32_t layer, uint32_t plane, gpu_block b,
                                  std::span<const uint64_t> hashes) {
  buf_.resize(hashes.size() * token_bytes_);
  got_.resize(buf_.size());
  for (size_t s = 0; s < hashes.size(); ++s) {
    token_kv(hashes[s], layer * g_.kv_planes + plane, rank(),
             {buf_.data() + s * token_bytes_, token_bytes_});
  }
  if (auto st = engine_->download(got_.data(), slot_ptr(layer, plane, b, 0), got_.size()); !st) {
    return ": " + st.to_string();
  }
  return got_ == buf_ ? std::string{} : " differs from its tokens' KV";
}

std::string model_runner::where(std::string_view request, gpu_block b, uint32_t layer,
                                uint32_t plane) const {
  return "rank " + std::to_string(rank()) + ": request " + std::string(request) + ": GPU block " +
         std::to_string(b) + " layer " + std::to_string(layer) +
         (g_.kv_planes == 1 ? "" : std::array{" K", " V"}[plane]);
}

void model_runner::verify(const load_check& check, const std::vector<gpu_block>& failed) {
  const std::span<const uint64_t> hashes{check.hashes};
  for (size_t b = 0; b < check.blocks.size(); ++b) {
    const gpu_block block = check.blocks[b];
    if (std::find(failed.begin(), failed.end(), block) != failed.end()) {
      ++stats_.blocks_load_failed;
      continue;
    }
    bool same = true;
    for (uint32_t l = 0; l < g_.layers && same; ++l) {
      for (uint32_t p = 0; p < g_.kv_planes; ++p) {
        auto why = differs(l, p, block, hashes.subspan(b * g_.gpu_block_size, g_.gpu_block_size));
        if (why.empty()) continue;
        same = false;
        if (stats_.mismatches.size() < mismatches_kept) {
          stats_.mismatches.push_back(where(check.request_id, block, l, p) + why);
        }
      }
    }
    ++stats_.loads_verified;
    if (!same) ++stats_.load_mismatches;
  }
}

std::vector<std::string> model_runner::check_tokens(std::string_view request,
                                                    std::span<const uint32_t> tokens, uint32_t n,
                                                    std::span<const gpu_block> blocks) {
  const uint32_t bs = g_.gpu_block_size;
  const size_t count = std::min({size_t{n}, tokens.size(), blocks.size() * bs});
  std::vector<uint64_t> hashes(count);
  uint64_t h = 0;
  for (size_t p = 0; p < count; ++p) hashes[p] = h = chain(h, tokens[p]);
  std::vector<std::string> out;
  for (size_t b = 0; b * bs < count; ++b) {
    const auto of_block = std::span<const uint64_t>{hashes}.subspan(b * bs);
    for (uint32_t l = 0; l < g_.layers; ++l) {
      for (uint32_t p = 0; p < g_.kv_planes; ++p) {
        auto why = differs(l, p, blocks[b], of_block.first(std::min<size_t>(bs, of_block.size())));
        if (!why.empty()) out.push_back(where(request, blocks[b], l, p) + why);
      }
    }
  }
  stats_.tokens_checked += count * g_.layers * g_.kv_planes;
  return out;
}

status model_runner::run_step(const model_input& in, std::chrono::nanoseconds bind_timeout) {
  last_step_ = {};
  if (wc_ == nullptr) {
    ++stats_.steps;
    const auto t0 = steady::now();
    auto st = forward(in);
    stats_.model_ns += ns_since(t0);
    return st;
  }
  const auto start = steady::now();
  const double others_before = stats_.model_ns + stats_.copy_ns;
  // Whatever way the step ends, the connector's share of its time is counted.
  struct account {
    model_runner& r;
    step_id step;
    steady::time_point start;
    double others_before;
    ~account() {
      const double ns =
          std::max(0.0, ns_since(start) - (r.stats_.model_ns + r.stats_.copy_ns - others_before));
      r.stats_.connector_ns += ns;
      if (r.step_sink_) r.step_sink_(step, static_cast<uint64_t>(ns));
    }
  } accounted{*this, in.step, start, others_before};
  // Align with the metadata stream: a rank that joined mid-run (restarted) may have metadata
  // whose model input it missed, or a model input planned before it registered.
  for (;;) {
    auto next = wc_->next_metadata_step(bind_timeout);
    if (!next) {
      ++stats_.step_errors;
      return next.error();
    }
    if (*next == in.step) break;
    if (*next > in.step) {
      ++stats_.steps_skipped;
      return status::success();
    }
    ++stats_.steps_connector_only;
    if (auto st = connector_step(*next, nullptr, bind_timeout); !st) return st;
  }
  return connector_step(in.step, &in, bind_timeout);
}

status model_runner::connector_step(step_id step, const model_input* in,
                                    std::chrono::nanoseconds bind_timeout) {
  embed::worker_step_hooks hooks;
  if (in != nullptr) {
    hooks.forward = [&](const status&) {
      const auto t0 = steady::now();
      for (const auto& c : in->loads) loading_[c.request_id] = c;
      auto st = forward(*in);
      stats_.model_ns += ns_since(t0);
      return st;
    };
  }
  if (after_save_) {
    hooks.after_save = after_save_;
  } else if (g_.finish_transfers) {
    hooks.after_save = [&] {
      const auto t1 = steady::now();
      auto st = wc_->finish_transfers();
      stats_.copy_ns += ns_since(t1);
      return st;
    };
  }
  embed::worker_step_outcome connector_only;
  auto& out = in != nullptr ? last_step_ : connector_only;
  out = embed::run_worker_step(*wc_, step, bind_timeout, hooks);
  stats_.step_errors += out.failures;
  if (!out.bound) return out.first_error;
  const auto t0 = steady::now();
  for (const auto& id : out.finished.finished_recving) {
    auto it = loading_.find(id);
    if (it == loading_.end()) continue;  // a load this runner was not told about
    verify(it->second, out.load_errors);
    loading_.erase(it);
  }
  stats_.model_ns += ns_since(t0);
  if (in != nullptr) ++stats_.steps;
  return out.first_error;
}

}  // namespace kvc::sim
