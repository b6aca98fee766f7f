#include "actors/worker/transfer_executor.hpp"

#include <algorithm>
#include <string>
#include <utility>

namespace kvc::worker {

namespace {

cuda::direction direction_of(transfer_kind k) noexcept {
  return k == transfer_kind::load ? cuda::direction::cpu_to_gpu : cuda::direction::gpu_to_cpu;
}

}  // namespace

result<transfer_executor> transfer_executor::create(const executor_config& cfg,
                                                  cuda::copy_engine& engine) {
  if (cfg.block_size_factor == 0) {
    return make_error(errc::invalid_argument, "transfer_executor: block_size_factor must be >= 1");
  }
  if (cfg.pool.base == nullptr || cfg.pool.num_slots == 0 || cfg.pool.slot_stride == 0) {
    return make_error(errc::invalid_argument,
                      "transfer_executor: the CPU pool region of rank " + std::to_string(cfg.rank) +
                          " is empty (base, num_slots and slot_stride must be non-zero)");
  }
  const uint64_t bytes = uint64_t{cfg.pool.num_slots} * cfg.pool.slot_stride;
  if (bytes / cfg.pool.num_slots != cfg.pool.slot_stride) {
    return make_error(errc::invalid_argument, "transfer_executor: CPU pool region size overflows");
  }
  if (auto st = engine.register_host(cfg.pool.base, bytes, cfg.pool.slot_stride); !st.ok()) {
    return st;
  }
  return transfer_executor(cfg, engine);
}

transfer_executor::transfer_executor(const executor_config& cfg, cuda::copy_engine& engine)
    : cfg_(cfg), engine_(&engine) {}

status transfer_executor::register_kv_caches(std::span<const cuda::kv_tensor_desc> tensors) {
  if (layout_) {
    return make_error(errc::precondition_failed,
                      "transfer_executor: kv caches are already registered");
  }
  return adopt_layout(cuda::kv_layout::from_tensors(tensors));
}

status transfer_executor::register_kv_regions(std::vector<cuda::kv_region> regions,
                                             uint64_t num_gpu_blocks) {
  if (layout_) {
    return make_error(errc::precondition_failed,
                      "transfer_executor: kv caches are already registered");
  }
  return adopt_layout(cuda::kv_layout::from_regions(std::move(regions), num_gpu_blocks));
}

status transfer_executor::adopt_layout(result<cuda::kv_layout> layout) {
  if (!layout.ok()) return layout.error();
  const uint64_t need = layout->bytes_per_slot(cfg_.block_size_factor);
  if (need > cfg_.pool.slot_stride) {
    return make_error(errc::layout_mismatch,
                      "transfer_executor: rank " + std::to_string(cfg_.rank) + " needs " +
                          std::to_string(need) + " bytes per offloaded block (" +
                          std::to_string(cfg_.block_size_factor) + " GPU blocks of " +
                          std::to_string(layout->gpu_block_bytes()) +
                          " bytes) but a CPU slot holds only " +
                          std::to_string(cfg_.pool.slot_stride) + " bytes");
  }
  // The engine checks every op's GPU side against the KV memory registered here (the cuda
  // backend asks the driver once that each range is device memory).
  for (const cuda::kv_region& r : layout->regions()) {
    const uint64_t bytes = (layout->num_blocks() - 1) * r.block_stride + r.page_bytes;
    if (auto st = engine_->register_device(reinterpret_cast<const void*>(r.base), bytes); !st) {
      return st;
    }
  }
  layout_ = std::move(layout).value();
  return {};
}

status transfer_executor::bind_connector_metadata(const connector_metadata& meta) {
  if (meta_) {
    return make_error(errc::precondition_failed,
                      "transfer_executor: metadata of step " + std::to_string(meta_->step) +
                          " is still bound (clear_connector_metadata first)");
  }
  std::unordered_set<job_id> ids;
  ids.reserve(meta.loads.size() + meta.stores.size());
  for (const auto* jobs : {&meta.loads, &meta.stores}) {
    for (const auto& j : *jobs) {
      if (!ids.insert(j.id).second || known_.contains(j.id)) {
        return make_error(errc::invalid_argument, "transfer_executor: step " +
                                                      std::to_string(meta.step) + " repeats job " +
                                                      std::to_string(j.id));
      }
    }
  }
  meta_ = meta;
  known_.insert(ids.begin(), ids.end());
  withdraw_failed_loads(meta);
  deferred_submitted_ = false;
  loads_started_ = false;
  stores_queued_ = false;
  return {};
}

void transfer_executor::withdraw_failed_loads(const connector_metadata& meta) {
  for (job_id id : meta.failed) {
    auto t = transfer_of_.find(id);
    if (t == transfer_of_.end()) continue;  // not in flight here: reported, or failed already
    const job_entry& entry = in_flight_.at(t->second);
    if (entry.kind != transfer_kind::load) continue;
    const auto& preempted = meta.flush_requests;
    if (std::find(preempted.begin(), preempted.end(), entry.request_id) != preempted.end()) {
      continue;  // preempted in this step: its copy is awaited, not withdrawn
    }
    withdrawn_.insert(id);
  }
}

void transfer_executor::clear_connector_metadata() {
  if (!meta_) return;
  if (!loads_started_) {
    for (const auto& j : meta_->loads) {
      fail_job({j.id, j.kind, j.request_id, j.gpu_blocks}, errc::precondition_failed,
               "the metadata was cleared before start_load_kv");
    }
  }
  if (!stores_queued_) {
    for (const auto& j : meta_->stores) {
      fail_job({j.id, j.kind, j.request_id, {}}, errc::precondition_failed,
               "the metadata was cleared before wait_for_save");
    }
  }
  meta_.reset();
}

void transfer_executor::flush_deferred(const cuda::submit_options& opts) {
  if (deferred_submitted_) return;
  deferred_submitted_ = true;
  submit_deferred_stores(opts);
}

void transfer_executor::submit_deferred_stores(const cuda::submit_options& opts) {
  auto queued = std::move(deferred_);
  deferred_.clear();
  for (const auto& job : queued) submit_job(job, opts);
}

status transfer_executor::handle_preemptions(const cuda::submit_options& opts) {
  if (!meta_) {
    return make_error(errc::precondition_failed, "transfer_executor: no metadata bound");
  }
  flush_deferred(opts);
  return wait_transfers(meta_->flush);
}

status transfer_executor::wait_transfers(std::span<const job_id> jobs) {
  std::vector<cuda::transfer_id> ids;
  for (job_id id : jobs) {
    if (auto it = transfer_of_.find(id); it != transfer_of_.end()) ids.push_back(it->second);
  }
  if (ids.empty()) return {};
  return engine_->wait(ids);
}

status transfer_executor::start_load_kv(const cuda::submit_options& opts) {
  if (!meta_) {
    return make_error(errc::precondition_failed, "transfer_executor: no metadata bound");
  }
  if (loads_started_) {
    return make_error(
        errc::precondition_failed,
        "transfer_executor: loads of step " + std::to_string(meta_->step) + " were already started");
  }
  loads_started_ = true;
  flush_deferred(opts);
  for (const auto& job : meta_->loads) submit_job(job, opts);
  return {};
}

status transfer_executor::wait_for_save() {
  if (!meta_) {
    return make_error(errc::precondition_failed, "transfer_executor: no metadata bound");
  }
  if (stores_queued_) {
    return make_error(
        errc::precondition_failed,
        "transfer_executor: stores of step " + std::to_string(meta_->step) + " were already queued");
  }
  stores_queued_ = true;
  for (const auto& job : meta_->stores) {
    store_jobs_[job.request_id].insert(job.id);
    deferred_.push_back(job);
  }
  return {};
}

void transfer_executor::fail_job(job_entry entry, errc error, std::string why) {
  failed_early_.push_back({std::move(entry), error, std::move(why)});
}

void transfer_executor::submit_job(const transfer_job& job, const cuda::submit_options& opts) {
  job_entry entry{job.id, job.kind, job.request_id, {}};
  if (job.kind == transfer_kind::load) entry.gpu_blocks = job.gpu_blocks;
  if (!layout_) {
    fail_job(std::move(entry), errc::precondition_failed, "the KV caches are not registered");
    return;
  }
  slot_ids_.assign(job.slots.begin(), job.slots.end());
  block_ids_.assign(job.gpu_blocks.begin(), job.gpu_blocks.end());
  cuda::kv_transfer_spec spec;
  spec.dir = direction_of(job.kind);
  spec.block_size_factor = cfg_.block_size_factor;
  spec.cpu = {reinterpret_cast<uintptr_t>(cfg_.pool.base), cfg_.pool.slot_stride,
              cfg_.pool.num_slots};
  spec.cpu_slot_ids = slot_ids_;
  spec.gpu_block_ids = block_ids_;
  spec.block_index = job.skip;
  if (job.skip >= cfg_.block_size_factor) {
    // block_index % factor would hide it
    fail_job(std::move(entry), errc::invalid_argument,
             "skip " + std::to_string(job.skip) + " is not below block_size_factor " +
                 std::to_string(cfg_.block_size_factor));
    return;
  }
  auto ops = layout_->build_ops(spec);
  if (!ops.ok()) {
    fail_job(std::move(entry), ops.code(), ops.error().message());
    return;
  }
  auto tid = engine_->submit(spec.dir, *ops, opts);
  if (!tid.ok()) {
    fail_job(std::move(entry), tid.code(), tid.error().message());
    return;
  }
  transfer_of_.emplace(job.id, *tid);
  in_flight_.emplace(*tid, std::move(entry));
}

void transfer_executor::finish_job(const job_entry& entry, rank_job_result result,
                                   worker_output& out) {
  const bool ok = result.ok;
  out.jobs.push_back(std::move(result));
  known_.erase(entry.id);
  if (entry.kind == transfer_kind::load) {
    const bool withdrawn = !withdrawn_.empty() && withdrawn_.erase(entry.id) > 0;
    if (!ok || withdrawn)
      load_errors_.insert(load_errors_.end(), entry.gpu_blocks.begin(), entry.gpu_blocks.end());
    out.finished_recving.push_back(entry.request_id);
    return;
  }
  auto it = store_jobs_.find(entry.request_id);
  if (it == store_jobs_.end()) return;
  it->second.erase(entry.id);
  if (it->second.empty() && waiting_.erase(entry.request_id) > 0) {
    out.finished_sending.push_back(entry.request_id);
    store_jobs_.erase(it);
  }
}

worker_output transfer_executor::get_finished(std::span<const std::string> finished_req_ids) {
  worker_output out;
  auto early = std::move(failed_early_);
  failed_early_.clear();
  for (auto& f : early) {
    finish_job(f.entry,
               {.job = f.entry.id, .kind = f.entry.kind, .ok = false, .error = f.error,
                .detail = clip_detail(f.why)},
               out);
  }
  for (const auto& rep : engine_->take_finished()) {
    auto it = in_flight_.find(rep.id);
    if (it == in_flight_.end()) {
      ++foreign_reports_;
      continue;
    }
    job_entry entry = std::move(it->second);
    in_flight_.erase(it);
    transfer_of_.erase(entry.id);
    rank_job_result r;
    r.job = entry.id;
    r.kind = entry.kind;
    r.ok = rep.ok;
    r.bytes = rep.bytes;
    r.seconds = rep.seconds;
    if (!rep.ok) {
      r.error = rep.error == errc::ok ? errc::device_error : rep.error;
      r.detail = clip_detail(rep.detail);
    }
    finish_job(entry, std::move(r), out);
  }
  for (const auto& req : finished_req_ids) {
    auto it = store_jobs_.find(req);
    if (it == store_jobs_.end()) continue;
    if (!it->second.empty()) {
      waiting_.insert(req);
    } else {
      out.finished_sending.push_back(req);
      store_jobs_.erase(it);
    }
  }
  return out;
}

std::vector<gpu_block> transfer_executor::get_block_ids_with_load_errors() {
  return std::exchange(load_errors_, {});
}

status transfer_executor::wait_in_flight() {
  if (in_flight_.empty()) return {};
  std::vector<cuda::transfer_id> ids;
  ids.reserve(in_flight_.size());
  for (const auto& [tid, entry] : in_flight_) ids.push_back(tid);
  return engine_->wait(ids);
}

job_phase transfer_executor::phase(job_id id) {
  if (!known_.contains(id)) return job_phase::unknown;
  if (auto it = transfer_of_.find(id); it != transfer_of_.end()) {
    const auto st = engine_->poll(it->second);
    return st == cuda::poll_state::pending ? job_phase::in_flight : job_phase::finished;
  }
  for (const auto& j : deferred_) {
    if (j.id == id) return job_phase::queued;
  }
  for (const auto& f : failed_early_) {
    if (f.entry.id == id) return job_phase::finished;
  }
  return job_phase::bound;  // in the current metadata, not submitted or queued yet
}

}  // namespace kvc::worker
