#include "cuda/faulty_copy_engine.hpp"

#include <utility>

namespace kvc::cuda {

namespace {

fault_target target_of(direction d) noexcept {
  return d == direction::gpu_to_cpu ? fault_target::store : fault_target::load;
}

}  // namespace

result<std::unique_ptr<faulty_copy_engine>> faulty_copy_engine::make(
    std::unique_ptr<copy_engine> target, fault_plan plan) {
  if (!target) return make_error(errc::invalid_argument, "faulty copy engine: null target");
  auto injector = fault_injector::make(std::move(plan));
  if (!injector) return injector.error();
  return std::unique_ptr<faulty_copy_engine>(
      new faulty_copy_engine(std::move(target), std::move(injector).value()));
}

faulty_copy_engine::faulty_copy_engine(std::unique_ptr<copy_engine> target, fault_injector injector)
    : target_(std::move(target)),
      injector_(std::move(injector)),
      name_("faulty(" + std::string(target_->name()) + ")") {}

status faulty_copy_engine::register_host(void* base, size_t bytes, size_t slot_stride) {
  return target_->register_host(base, bytes, slot_stride);
}

status faulty_copy_engine::register_device(const void* base, size_t bytes) {
  return target_->register_device(base, bytes);
}

result<device_buffer> faulty_copy_engine::allocate_device(size_t bytes) {
  return target_->allocate_device(bytes);
}

status faulty_copy_engine::upload(void* device_dst, const void* host_src, size_t bytes) {
  return target_->upload(device_dst, host_src, bytes);
}

status faulty_copy_engine::download(void* host_dst, const void* device_src, size_t bytes) {
  return target_->download(host_dst, device_src, bytes);
}

status faulty_copy_engine::health() const {
  if (lost_.empty()) return target_->health();
  return make_error(errc::device_unavailable, "device unusable since " + lost_);
}

result<transfer_id> faulty_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                               const submit_options& opts) {
  if (!lost_.empty()) return health();
  const fault_injector::decision d = injector_.next(target_of(dir));
  if (d.action == fault_action::fail_at_submit) {
    return make_error(errc::injected_fault,
                      "injected fault: fail_at_submit (rule " + std::to_string(d.rule) + ", " +
                          std::string(to_string(target_of(dir))) + " #" +
                          std::to_string(injector_.seen(target_of(dir)) - 1) + ")");
  }
  auto id = target_->submit(dir, ops, opts);
  if (!id) return id;
  if (d.action == fault_action::lose_device) {
    lost_ = "injected fault: lose_device (rule " + std::to_string(d.rule) + ", " +
            std::string(to_string(target_of(dir))) + " #" +
            std::to_string(injector_.seen(target_of(dir)) - 1) + ")";
  }
  ++accepted_;
  entry e;
  e.dir = dir;
  e.action = d.action;
  if (d.action == fault_action::delay && d.release_after != 0) {
    e.release_at = accepted_ + d.release_after;
  }
  entries_.emplace(*id, std::move(e));
  order_[static_cast<size_t>(dir)].push_back(*id);
  return id;
}

bool faulty_copy_engine::is_held(const entry& e) const {
  if (e.action != fault_action::delay || e.released) return false;
  return e.release_at == 0 || accepted_ < e.release_at;
}

void faulty_copy_engine::pump() {
  for (transfer_report& r : target_->take_finished()) {
    auto it = entries_.find(r.id);
    if (it != entries_.end()) it->second.report = r;
  }
  for (auto& order : order_) {
    while (!order.empty()) {
      auto it = entries_.find(order.front());
      entry& e = it->second;
      if (!e.report || is_held(e)) break;
      transfer_report r = *e.report;
      if (!lost_.empty()) {
        r.ok = false;
        r.error = errc::device_unavailable;
        r.detail = "device unusable since " + lost_;
      } else if (e.action == fault_action::fail_at_completion && r.ok) {
        r.ok = false;
        r.error = errc::injected_fault;
        r.detail = "faulty copy engine: injected fail_at_completion";
      }
      ready_state_[r.id] = r.ok ? poll_state::done : poll_state::failed;
      ready_.push_back(r);
      entries_.erase(it);
      order.pop_front();
    }
  }
}

poll_state faulty_copy_engine::poll(transfer_id id) {
  pump();
  if (auto it = ready_state_.find(id); it != ready_state_.end()) return it->second;
  return entries_.count(id) != 0 ? poll_state::pending : poll_state::unknown;
}

status faulty_copy_engine::wait(std::span<const transfer_id> ids) {
  std::string unknown;
  std::vector<transfer_id> inner;
  for (transfer_id id : ids) {
    if (ready_state_.count(id) != 0) continue;
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    // Release every delay at or ahead of `id` in its direction: FIFO would hold it behind them.
    for (transfer_id ahead : order_[static_cast<size_t>(it->second.dir)]) {
      entries_.at(ahead).released = true;
      if (ahead == id) break;
    }
    if (!it->second.report) inner.push_back(id);
  }
  if (!inner.empty()) {
    if (status s = target_->wait(inner); !s) return s;
  }
  pump();
  if (!unknown.empty()) {
    return make_error(errc::not_found, "wait: unknown transfer id(s) " + unknown);
  }
  return {};
}

std::vector<transfer_report> faulty_copy_engine::take_finished() {
  pump();
  std::vector<transfer_report> out;
  out.swap(ready_);
  for (const transfer_report& r : out) ready_state_.erase(r.id);
  return out;
}

bool faulty_copy_engine::release(transfer_id id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !is_held(it->second)) return false;
  it->second.released = true;
  return true;
}

size_t faulty_copy_engine::release_all() {
  size_t n = 0;
  for (auto& [id, e] : entries_) {
    if (is_held(e)) {
      e.released = true;
      ++n;
    }
  }
  return n;
}

size_t faulty_copy_engine::held() const {
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += is_held(e) ? 1 : 0;
  return n;
}

}  // namespace kvc::cuda
