#include "launch/engines/smoke/smoke_engine.hpp"

#include <string>

namespace kvc::launch {

namespace sched = kvc::scheduler;

result<smoke_engine> smoke_engine::create(uint32_t world_size, uint32_t slots,
                                          const synthetic_kv_spec& kv, smoke_options opts) {
  if (auto st = validate(kv); !st) return st;
  if (world_size == 0) return make_error(errc::invalid_argument, "smoke: world size 0");
  if (slots < 2) return make_error(errc::invalid_argument, "smoke: needs --slots >= 2");
  if (kv.gpu_blocks < 2 * uint64_t{kv.block_factor} + 1) {
    return make_error(errc::invalid_argument,
                      "smoke: needs --gpu-blocks >= 2 * --block-factor + 1");
  }
  if (!opts.rank_nodes.empty() && opts.rank_nodes.size() != world_size) {
    return make_error(errc::invalid_argument, "smoke: " + std::to_string(opts.rank_nodes.size()) +
                                                  " rank nodes for a world of " +
                                                  std::to_string(world_size));
  }
  return smoke_engine{world_size, kv, std::move(opts)};
}

smoke_engine::smoke_engine(uint32_t world_size, const synthetic_kv_spec& kv, smoke_options opts)
    : world_size_(world_size),
      kv_(kv),
      half_((kv.gpu_blocks - 1) / 2),
      groups_(half_ / kv.block_factor),
      rank_restarts_(opts.rank_restarts),
      rank_nodes_(std::move(opts.rank_nodes)) {}

uint64_t smoke_engine::membership(const embed::scheduler_connector& sc) {
  const auto changed = sc.ranks_changed();
  return changed.losses + changed.restarts;
}

void smoke_engine::skip_round() {
  if (phase_ == 0) return;  // the failed step was the round's last
  phase_ = 0;
  ++round_;
}

std::vector<gpu_block> smoke_engine::blocks(uint64_t round, bool destination) const {
  const uint32_t first =
      1 + static_cast<uint32_t>(round % groups_) * kv_.block_factor + (destination ? half_ : 0);
  std::vector<gpu_block> out;
  for (uint32_t j = 0; j < kv_.block_factor; ++j) out.push_back(first + j);
  return out;
}

std::vector<block_key> smoke_engine::keys(uint64_t round, bool fresh) const {
  std::vector<block_key> out;
  const uint64_t base = (2 * round + (fresh ? 1 : 0)) * kv_.block_factor + 1;
  for (uint32_t j = 0; j < kv_.block_factor; ++j) out.push_back(block_key::from_index(base + j));
  return out;
}

status smoke_engine::run_step(embed::scheduler_connector& sc, uint64_t k,
                              std::chrono::milliseconds timeout) {
  const uint64_t round = round_;
  const uint32_t phase = phase_;
  const step_id step = k + 1;
  const uint32_t tokens = kv_.block_factor * gpu_block_size;
  const std::string id = std::string{"abc"[phase]} + std::to_string(round);
  const auto src = blocks(round, false);
  const auto dst = blocks(round, true);
  const auto ks = keys(round, phase == 2);
  std::vector<gpu_block> alloc = phase == 0 ? src : dst;
  sched::request_view req{id, ks, tokens};
  if (phase == 1) {
    alloc.push_back(kv_.gpu_blocks - 1);  // the one token past the hit is computed
    req.num_tokens = tokens + 1;
  }
  const auto match = sc.get_num_new_matched_tokens(req, 0);
  const uint32_t want_hit = phase == 1 ? tokens : 0;
  if (match.tokens != want_hit) {
    return make_error(errc::internal, "smoke: step " + std::to_string(step) + ": " + id + " hit " +
                                          std::to_string(match.tokens.value_or(0)) +
                                          " tokens, expected " + std::to_string(want_hit));
  }
  if (auto st = sc.update_state_after_alloc(req, alloc, want_hit); !st) return st;
  std::vector<sched::scheduled_request> fresh;
  if (phase != 1) fresh.push_back({req, alloc, 0, tokens, false});
  auto meta = sc.build_connector_meta({step, fresh, {}, {}});
  if (!meta) return meta.error();
  // What the metadata went to: the ranks live once build_connector_meta handled arrivals.
  const uint64_t members = membership(sc);
  if (phase == 0) round_membership_ = members;
  const bool interrupted = rank_restarts_ && members != round_membership_;
  auto up = sc.update_connector_output(step, timeout);
  if (!up) return up.error();
  sc.request_finished(id);
  if (++phase_ == 3) {
    phase_ = 0;
    ++round_;
  }
  return check(*up, *meta, sc, phase == 1 ? nullptr : &src, interrupted);
}

status smoke_engine::check(const embed::connector_update& up, const connector_metadata& meta,
                           const embed::scheduler_connector& sc,
                           const std::vector<gpu_block>* source, bool interrupted) {
  const std::string what = "smoke: step " + std::to_string(meta.step);
  const auto& jobs = source ? meta.stores : meta.loads;
  if (jobs.size() != 1 || jobs[0].slots.size() != 1 || up.jobs.size() != 1 ||
      up.jobs[0].job != jobs[0].id) {
    return make_error(errc::internal, what + " planned " + std::to_string(jobs.size()) +
                                          " jobs and got " + std::to_string(up.jobs.size()) +
                                          " results, expected one of each");
  }
  const job_result& r = up.jobs[0];
  if (!r.ok && rank_restarts_ && r.error == errc::io_error) {
    ++jobs_failed_;  // a rank was lost or restarted under it
    needs_workers_ = true;
    skip_round();
    return status::success();
  }
  if (!r.ok) return make_error(r.error, what + " failed: " + std::string(to_string(r.error)));
  const uint64_t want = uint64_t{world_size_} * kv_.slot_bytes();
  if (r.bytes != want) {
    return make_error(errc::internal, what + " moved " + std::to_string(r.bytes) +
                                          " bytes, expected " + std::to_string(want));
  }
  ++jobs_ok_;
  bytes_ += r.bytes;
  if (!source) return status::success();
  if (interrupted) {
    ++rounds_interrupted_;  // the loaded GPU blocks may be a restarted worker's fresh ones
    needs_workers_ = true;
    return status::success();
  }
  const cpu_slot slot = jobs[0].slots[0];
  for (rank_id rank = 0; rank < world_size_; ++rank) {
    if (!rank_nodes_.empty() && rank_nodes_[rank] != 0) continue;  // another node's segment
    const auto bytes = sc.pool_slot(rank, slot);
    if (bytes.size() < kv_.slot_bytes()) {
      return make_error(errc::invalid_argument,
                        what + ": slot " + std::to_string(slot) + " is outside the pool");
    }
    for (size_t j = 0; j < source->size(); ++j) {
      for (uint32_t l = 0; l < kv_.layers; ++l) {
        const std::byte* page = bytes.data() + (j * kv_.layers + l) * kv_.page_bytes;
        for (uint64_t o = 0; o < kv_.page_bytes; ++o) {
          if (page[o] != kv_pattern(rank, l, (*source)[j], o)) {
            return make_error(errc::internal,
                              what + ": slot " + std::to_string(slot) + " of rank " +
                                  std::to_string(rank) + " differs from GPU block " +
                                  std::to_string((*source)[j]) + " of layer " + std::to_string(l) +
                                  " at byte " + std::to_string(o));
          }
        }
      }
    }
  }
  ++slots_checked_;
  return status::success();
}

}  // namespace kvc::launch
