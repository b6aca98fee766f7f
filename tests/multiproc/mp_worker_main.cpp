// kvc_mp_worker: one rank of the multi-process engine test. It plays an engine's worker process:
// it registers with the scheduler through the embedding API (worker_connector, connect mode,
// sim backend), holds the rank's KV cache (2 layers of (blocks, 4, 1, 8) 2-byte tensors), and for
// every step line from the engine (mp_protocol.hpp) makes the worker-side connector calls in
// vLLM's order around a forward that writes each scheduled token's KV. It checks:
//   * every loaded token (V entries) holds exactly the KV the model computes for it;
//   * every store job that finished on this rank put exactly the GPU blocks' bytes into its
//     CPU slots (read back from the shm pool through the rank's own mapping);
//   * no job failed and no load reported failed blocks.
// Usage: kvc_mp_worker --port P --rank R --instance I
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/embed/worker_connector.hpp"
#include "actors/embed/worker_step.hpp"
#include "tests/multiproc/mp_protocol.hpp"

namespace {

using namespace std::chrono_literals;
namespace embed = kvc::embed;

class rank_process {
 public:
  explicit rank_process(std::unique_ptr<embed::worker_connector> wc) : wc_(std::move(wc)) {}

  kvc::status init() {
    std::vector<kvc::cuda::kv_tensor_desc> descs;
    for (uint32_t l = 0; l < kvc::mp::num_layers; ++l) {
      auto buf = wc_->copy_engine().allocate_device(kvc::mp::num_gpu_blocks * kvc::mp::page_bytes);
      if (!buf) return buf.error();
      layers_.push_back(*buf);
      descs.push_back({reinterpret_cast<uintptr_t>(buf->data),
                       {kvc::mp::num_gpu_blocks, kvc::mp::gpu_block_size, 1, kvc::mp::head_dim},
                       {static_cast<int64_t>(kvc::mp::page_bytes), kvc::mp::token_bytes,
                        kvc::mp::token_bytes, 2},
                       2,
                       /*block_dim=*/0});
    }
    return wc_->register_kv_caches(descs);
  }

  /// One engine step; an empty string when everything was right, else the first problem.
  std::string run(const kvc::mp::step_command& c) {
    // The forward: the stores to check are the bound metadata's; the loads are verified and
    // the tokens written only while every call so far succeeded.
    std::string forward_err;
    kvc::embed::worker_step_hooks hooks{.finished_ids = &c.finished};
    hooks.forward = [&](const kvc::status& so_far) {
      for (const auto& j : wc_->metadata()->stores) stores_[j.id] = j;
      if (!so_far) return kvc::status::success();
      forward_err = verify(c.verifies);
      if (forward_err.empty()) forward_err = forward(c.writes);
      return forward_err.empty() ? kvc::status::success()
                                 : kvc::make_error(kvc::errc::internal, forward_err);
    };
    if (c.drain) hooks.after_save = [&] { return wc_->finish_transfers(); };
    const auto out = kvc::embed::run_worker_step(*wc_, c.step, 30s, hooks);
    if (!out.bound) return "bind: " + out.first_error.to_string();
    std::string err;
    if (out.failed_call == "forward") {
      err = forward_err;
    } else if (!out.first_error) {
      const std::string_view call =
          out.failed_call == "after_save" ? "finish_transfers" : out.failed_call;
      err = std::string(call) + ": " + out.first_error.to_string();
    }
    const auto& fin = out.finished;
    for (const auto& j : fin.jobs) {
      if (!j.ok && err.empty()) {
        err = "job " + std::to_string(j.job) + " failed: " + std::string(kvc::to_string(j.error));
      }
      if (j.kind == kvc::transfer_kind::load) {
        ++loads_seen_;
        continue;
      }
      ++stores_seen_;
      auto it = stores_.find(j.job);
      if (it == stores_.end()) {
        if (err.empty()) err = "result of store job " + std::to_string(j.job) + " never bound";
        continue;
      }
      if (j.ok && err.empty()) err = check_store(it->second);
      stores_.erase(it);
    }
    if (!out.load_errors.empty() && err.empty()) {
      err = std::to_string(out.load_errors.size()) + " GPU blocks failed to load";
    }
    return err;
  }

  std::string totals() const {
    return "D " + std::to_string(verified_) + " " + std::to_string(stores_checked_) + " " +
           std::to_string(loads_seen_) + " " + std::to_string(stores_seen_);
  }

 private:
  std::byte* token_ptr(uint32_t layer, const kvc::mp::token_ref& t) const {
    return static_cast<std::byte*>(layers_[layer].data) + t.block * kvc::mp::page_bytes +
           t.pos * kvc::mp::token_bytes;
  }

  std::string forward(const std::vector<kvc::mp::token_ref>& writes) {
    std::byte buf[kvc::mp::token_bytes];
    for (const auto& t : writes) {
      for (uint32_t l = 0; l < kvc::mp::num_layers; ++l) {
        kvc::mp::token_kv(t.hash, l, wc_->rank(), buf);
        if (auto st = wc_->copy_engine().upload(token_ptr(l, t), buf, sizeof buf); !st) {
          return "forward: " + st.to_string();
        }
      }
    }
    return {};
  }

  std::string verify(const std::vector<kvc::mp::token_ref>& refs) {
    std::byte want[kvc::mp::token_bytes];
    std::byte got[kvc::mp::token_bytes];
    for (const auto& t : refs) {
      for (uint32_t l = 0; l < kvc::mp::num_layers; ++l) {
        kvc::mp::token_kv(t.hash, l, wc_->rank(), want);
        if (auto st = wc_->copy_engine().download(got, token_ptr(l, t), sizeof got); !st) {
          return "verify: " + st.to_string();
        }
        if (std::memcmp(want, got, sizeof got) != 0) {
          return "loaded token in block " + std::to_string(t.block) + " pos " +
                 std::to_string(t.pos) + " layer " + std::to_string(l) + " differs";
        }
        ++verified_;
      }
    }
    return {};
  }

  /// The job's CPU slots hold its GPU blocks, packed as cuda/kv_layout.hpp describes.
  std::string check_store(const kvc::transfer_job& job) {
    const kvc::cuda::kv_layout* layout = wc_->layout();
    const uint32_t f = kvc::mp::block_factor;
    std::vector<std::byte> gpu;
    for (size_t i = 0; i < job.slots.size(); ++i) {
      const auto slot = wc_->pool_slot(job.slots[i]);
      if (slot.empty()) return "store job " + std::to_string(job.id) + ": slot out of range";
      for (uint32_t j = 0; j < f; ++j) {
        const int64_t g = static_cast<int64_t>(i * f + j) - job.skip;
        if (g < 0) continue;
        const kvc::gpu_block b = job.gpu_blocks.at(static_cast<size_t>(g));
        for (size_t r = 0; r < layout->regions().size(); ++r) {
          const auto& reg = layout->regions()[r];
          gpu.resize(reg.page_bytes);
          const auto* src = reinterpret_cast<const void*>(reg.base + b * reg.block_stride);
          if (auto st = wc_->copy_engine().download(gpu.data(), src, reg.page_bytes); !st) {
            return "check_store: " + st.to_string();
          }
          const uint64_t off = j * layout->gpu_block_bytes() + layout->region_offset(r);
          if (std::memcmp(slot.data() + off, gpu.data(), reg.page_bytes) != 0) {
            return "store job " + std::to_string(job.id) + ": slot " +
                   std::to_string(job.slots[i]) + " differs from GPU block " + std::to_string(b);
          }
        }
      }
      ++stores_checked_;
    }
    return {};
  }

  std::unique_ptr<embed::worker_connector> wc_;
  std::vector<kvc::cuda::device_buffer> layers_;
  std::map<kvc::job_id, kvc::transfer_job> stores_;  // bound store jobs not finished here yet
  uint64_t verified_ = 0;
  uint64_t stores_checked_ = 0;
  uint64_t loads_seen_ = 0;
  uint64_t stores_seen_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  embed::worker_connector_config cfg;
  cfg.mode = embed::connection_mode::connect;
  cfg.token = kvc::mp::token;
  cfg.topology = {kvc::mp::tp_size, kvc::mp::pp_size, 0};
  cfg.pool.slots_per_rank = kvc::mp::cpu_slots;
  cfg.pool.slot_bytes = kvc::mp::slot_bytes;
  cfg.block_size_factor = kvc::mp::block_factor;
  cfg.register_timeout = 20s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const std::string v = argv[i + 1];
    if (k == "--port") {
      cfg.network.port = static_cast<uint16_t>(std::stoul(v));
    } else if (k == "--rank") {
      cfg.rank = static_cast<kvc::rank_id>(std::stoul(v));
    } else if (k == "--instance") {
      cfg.pool.instance = v;
    } else {
      std::cout << "E 0 unknown flag " << k << std::endl;
      return 1;
    }
  }
  auto wc = embed::worker_connector::create(cfg);
  if (!wc) {
    std::cout << "E 0 create: " << wc.error().to_string() << std::endl;
    return 2;
  }
  rank_process rank{std::move(wc).value()};
  if (auto st = rank.init(); !st) {
    std::cout << "E 0 init: " << st.to_string() << std::endl;
    return 1;
  }
  std::cout << "R " << cfg.rank << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "Q") break;
    kvc::mp::step_command c;
    if (!kvc::mp::decode(line, c)) {
      std::cout << "E 0 malformed line" << std::endl;
      return 1;
    }
    const std::string err = rank.run(c);
    if (err.empty()) {
      std::cout << "A " << c.step << std::endl;
    } else {
      std::cout << "E " << c.step << " " << err << std::endl;
    }
  }
  std::cout << rank.totals() << std::endl;
  return 0;
}
