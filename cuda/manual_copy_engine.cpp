#include "cuda/manual_copy_engine.hpp"

#include <cstring>
#include <string>

#include "cuda/op_validator.hpp"

namespace kvc::cuda {

result<transfer_id> manual_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                               const submit_options& /*opts*/) {
  if (status s = memory_.check_ops(dir, ops); !s) return s;
  const transfer_id id = next_id_++;
  queue_of(dir).push_back(job{id, std::vector<copy_op>(ops.begin(), ops.end()), total_bytes(ops)});
  queued_.emplace(id, dir);
  return id;
}

void manual_copy_engine::complete_head(direction dir) {
  std::deque<job>& q = queue_of(dir);
  const job& j = q.front();
  for (const copy_op& op : j.ops) std::memcpy(op.dst, op.src, op.bytes);
  finished_.push_back(done_report(j.id, dir, j.bytes));
  finished_state_.emplace(j.id, poll_state::done);
  queued_.erase(j.id);
  q.pop_front();
}

size_t manual_copy_engine::advance(direction dir, size_t n) {
  size_t done = 0;
  while (done < n && !queue_of(dir).empty()) {
    complete_head(dir);
    ++done;
  }
  return done;
}

size_t manual_copy_engine::advance_all() {
  size_t done = 0;
  for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
    done += advance(d, queue_of(d).size());
  }
  return done;
}

size_t manual_copy_engine::pending(direction dir) const noexcept {
  return queues_[static_cast<size_t>(dir)].size();
}

poll_state manual_copy_engine::poll(transfer_id id) {
  if (auto it = finished_state_.find(id); it != finished_state_.end()) return it->second;
  return queued_.count(id) != 0 ? poll_state::pending : poll_state::unknown;
}

status manual_copy_engine::wait(std::span<const transfer_id> ids) {
  std::string unknown;
  for (transfer_id id : ids) {
    if (finished_state_.count(id) != 0) continue;
    auto it = queued_.find(id);
    if (it == queued_.end()) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    const direction dir = it->second;
    while (queued_.count(id) != 0) complete_head(dir);
  }
  if (!unknown.empty()) {
    return make_error(errc::not_found, "wait: unknown transfer id(s) " + unknown);
  }
  return {};
}

std::vector<transfer_report> manual_copy_engine::take_finished() {
  std::vector<transfer_report> out;
  out.swap(finished_);
  for (const transfer_report& r : out) finished_state_.erase(r.id);
  return out;
}

}  // namespace kvc::cuda
