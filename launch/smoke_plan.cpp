#include "launch/smoke_plan.hpp"

#include <string>

namespace kvc::launch {

result<smoke_plan> smoke_plan::create(uint32_t world_size, uint32_t slots,
                                      const worker::synthetic_kv_spec& kv) {
  if (auto st = worker::validate(kv); !st) return st;
  if (world_size == 0) return make_error(errc::invalid_argument, "smoke: world size 0");
  if (slots < 2) return make_error(errc::invalid_argument, "smoke: needs --slots >= 2");
  if (kv.gpu_blocks < 2 * uint64_t{kv.block_factor} + 1) {
    return make_error(errc::invalid_argument,
                      "smoke: needs --gpu-blocks >= 2 * --block-factor + 1");
  }
  return smoke_plan{world_size, slots, kv};
}

smoke_plan::smoke_plan(uint32_t world_size, uint32_t slots, const worker::synthetic_kv_spec& kv)
    : world_size_(world_size),
      slots_(slots),
      kv_(kv),
      half_((kv.gpu_blocks - 1) / 2),
      groups_(half_ / kv.block_factor) {}

std::vector<gpu_block> smoke_plan::source(uint64_t round) const {
  const uint32_t first = 1 + static_cast<uint32_t>(round % groups_) * kv_.block_factor;
  std::vector<gpu_block> blocks;
  for (uint32_t j = 0; j < kv_.block_factor; ++j) blocks.push_back(first + j);
  return blocks;
}

std::vector<gpu_block> smoke_plan::destination(uint64_t round) const {
  auto blocks = source(round);
  for (auto& b : blocks) b += half_;
  return blocks;
}

connector_metadata smoke_plan::step(uint64_t k) {
  const uint64_t round = k / 3;
  const auto s1 = static_cast<cpu_slot>((2 * round) % slots_);
  const auto s2 = static_cast<cpu_slot>((2 * round + 1) % slots_);
  transfer_job job;
  job.id = k + 1;
  job.request_id = "smoke-" + std::to_string(round);
  switch (k % 3) {
    case 0:
      job.kind = transfer_kind::store;
      job.slots = {s1};
      job.gpu_blocks = source(round);
      break;
    case 1:
      job.kind = transfer_kind::load;
      job.slots = {s1};
      job.gpu_blocks = destination(round);
      break;
    default:
      job.kind = transfer_kind::store;
      job.slots = {s2};
      job.gpu_blocks = destination(round);
      break;
  }
  connector_metadata meta;
  meta.step = k + 1;
  (job.kind == transfer_kind::load ? meta.loads : meta.stores).push_back(std::move(job));
  if (results_.size() <= k) results_.resize(k + 1, false);
  return meta;
}

status smoke_plan::on_output(const connector_output& out, const shm::segment& pool) {
  for (const job_result& r : out.jobs) {
    const std::string what = "smoke: job " + std::to_string(r.job);
    if (r.job == 0 || r.job > results_.size()) {
      return make_error(errc::internal, what + " was never issued");
    }
    const uint64_t k = r.job - 1;
    if (results_[k]) return make_error(errc::internal, what + " has a second result");
    results_[k] = true;
    if (!r.ok) return make_error(r.error, what + " failed: " + std::string(to_string(r.error)));
    const uint64_t want = uint64_t{world_size_} * kv_.slot_bytes();
    if (r.bytes != want) {
      return make_error(errc::internal, what + " moved " + std::to_string(r.bytes) +
                                            " bytes, expected " + std::to_string(want));
    }
    ++jobs_ok_;
    bytes_ += r.bytes;
    const uint64_t round = k / 3;
    if (k % 3 == 0) {
      if (auto st = check_slot(pool, static_cast<cpu_slot>((2 * round) % slots_), source(round));
          !st) {
        return st;
      }
    } else if (k % 3 == 2) {
      if (auto st =
              check_slot(pool, static_cast<cpu_slot>((2 * round + 1) % slots_), source(round));
          !st) {
        return st;
      }
    }
  }
  return status::success();
}

status smoke_plan::check_slot(const shm::segment& pool, cpu_slot slot,
                              const std::vector<gpu_block>& blocks) {
  for (rank_id r = 0; r < world_size_; ++r) {
    const std::byte* base = pool.slot(r, slot);
    if (base == nullptr) {
      return make_error(errc::invalid_argument, "smoke: slot " + std::to_string(slot) +
                                                    " of rank " + std::to_string(r) +
                                                    " is outside the pool");
    }
    for (size_t j = 0; j < blocks.size(); ++j) {
      for (uint32_t l = 0; l < kv_.layers; ++l) {
        const std::byte* page = base + (j * kv_.layers + l) * kv_.page_bytes;
        for (uint64_t o = 0; o < kv_.page_bytes; ++o) {
          if (page[o] != worker::kv_pattern(r, l, blocks[j], o)) {
            return make_error(errc::internal, "smoke: slot " + std::to_string(slot) + " of rank " +
                                                  std::to_string(r) + " differs from GPU block " +
                                                  std::to_string(blocks[j]) + " of layer " +
                                                  std::to_string(l) + " at byte " +
                                                  std::to_string(o));
          }
        }
      }
    }
  }
  ++slots_checked_;
  return status::success();
}

}  // namespace kvc::launch
