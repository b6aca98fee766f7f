#include "launch/engines/sim/model_runner.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "actors/embed/worker_step.hpp"
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
      g.page_bytes % g.gpu_block_size != 0) {
    return make_error(errc::invalid_argument,
                      "model runner: layers, gpu blocks (>= 2) and a page of whole tokens needed");
  }
  const uint64_t layer_bytes = g.page_bytes * g.gpu_blocks;
  std::vector<std::byte*> layers;
  std::vector<cuda::kv_tensor_desc> descs;
  for (uint32_t l = 0; l < g.layers; ++l) {
    auto buf = engine.allocate_device(layer_bytes);
    if (!buf) return buf.error();
    layers.push_back(static_cast<std::byte*>(buf->data));
    descs.push_back({.base = reinterpret_cast<uintptr_t>(buf->data),
                     .shape = {int64_t{g.gpu_blocks}, static_cast<int64_t>(g.page_bytes)},
                     .strides = {static_cast<int64_t>(g.page_bytes), 1},
                     .element_size = 1,
                     .block_dim = 0});
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
      token_bytes_(g.page_bytes / g.gpu_block_size),
      layers_(std::move(layers)) {}

std::byte* model_runner::slot_ptr(uint32_t layer, gpu_block b, uint32_t slot) const {
  return layers_[layer] + uint64_t{b} * g_.page_bytes + uint64_t{slot} * token_bytes_;
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
      for (size_t k = 0; k < n; ++k) {
        token_kv(w[i + k].hash, l, rank(), {buf_.data() + k * token_bytes_, token_bytes_});
      }
      if (auto st = engine_->upload(slot_ptr(l, w[i].block, w[i].slot), buf_.data(), buf_.size());
          !st) {
        return st;
      }
    }
    stats_.tokens_written += n;
    i = j;
  }
  return status::success();
}

void model_runner::verify(const load_check& check, const std::vector<gpu_block>& failed) {
  buf_.resize(g_.page_bytes);
  got_.resize(g_.page_bytes);
  for (size_t b = 0; b < check.blocks.size(); ++b) {
    const gpu_block block = check.blocks[b];
    if (std::find(failed.begin(), failed.end(), block) != failed.end()) {
      ++stats_.blocks_load_failed;
      continue;
    }
    bool same = true;
    for (uint32_t l = 0; l < g_.layers && same; ++l) {
      for (uint32_t s = 0; s < g_.gpu_block_size; ++s) {
        token_kv(check.hashes[b * g_.gpu_block_size + s], l, rank(),
                 {buf_.data() + s * token_bytes_, token_bytes_});
      }
      if (auto st = engine_->download(got_.data(), slot_ptr(l, block, 0), g_.page_bytes);
          !st || got_ != buf_) {
        same = false;
        if (stats_.mismatches.size() < mismatches_kept) {
          stats_.mismatches.push_back(
              "rank " + std::to_string(rank()) + ": request " + check.request_id + ": GPU block " +
              std::to_string(block) + " layer " + std::to_string(l) +
              (st ? " differs from its tokens' KV" : ": " + st.to_string()));
        }
      }
    }
    ++stats_.loads_verified;
    if (!same) ++stats_.load_mismatches;
  }
}

status model_runner::run_step(const model_input& in, std::chrono::nanoseconds bind_timeout) {
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
      const double ns = std::max(
          0.0, ns_since(start) - (r.stats_.model_ns + r.stats_.copy_ns - others_before));
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
  if (g_.finish_transfers) {
    hooks.after_save = [&] {
      const auto t1 = steady::now();
      auto st = wc_->finish_transfers();
      stats_.copy_ns += ns_since(t1);
      return st;
    };
  }
  const auto out = embed::run_worker_step(*wc_, step, bind_timeout, hooks);
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
