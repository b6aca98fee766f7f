#include "cuda/sim_copy_engine.hpp"

#include <chrono>
#include <cstring>
#include <string>

#include "cuda/op_validator.hpp"

namespace kvc::cuda {

sim_copy_engine::sim_copy_engine() {
  for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
    lane_of(d).thread = std::thread([this, d] { run_lane(d); });
  }
}

sim_copy_engine::~sim_copy_engine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  for (lane& l : lanes_) {
    l.work_cv.notify_all();
    l.thread.join();
  }
}

void sim_copy_engine::run_lane(direction dir) {
  lane& l = lane_of(dir);
  std::unique_lock lk(mu_);
  for (;;) {
    l.work_cv.wait(lk, [&] { return stopping_ || (!l.paused && !l.queue.empty()); });
    if (stopping_) return;
    job j = std::move(l.queue.front());
    l.queue.pop_front();
    lk.unlock();

    const auto t0 = std::chrono::steady_clock::now();
    for (const copy_op& op : j.ops) std::memcpy(op.dst, op.src, op.bytes);
    const auto t1 = std::chrono::steady_clock::now();

    lk.lock();
    finished_.push_back(
        done_report(j.id, dir, j.bytes, std::chrono::duration<double>(t1 - t0).count()));
    states_[j.id].st = poll_state::done;
    done_cv_.notify_all();
  }
}

result<transfer_id> sim_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                            const submit_options& /*opts*/) {
  if (status s = memory_.check_ops(dir, ops); !s) return s;
  const transfer_id id = next_id_++;
  job j{id, std::vector<copy_op>(ops.begin(), ops.end()), total_bytes(ops)};
  {
    std::lock_guard lk(mu_);
    states_.emplace(id, state{dir, poll_state::pending});
    lane_of(dir).queue.push_back(std::move(j));
  }
  lane_of(dir).work_cv.notify_one();
  return id;
}

poll_state sim_copy_engine::poll(transfer_id id) {
  std::lock_guard lk(mu_);
  auto it = states_.find(id);
  return it == states_.end() ? poll_state::unknown : it->second.st;
}

status sim_copy_engine::wait(std::span<const transfer_id> ids) {
  std::unique_lock lk(mu_);
  std::vector<transfer_id> known;
  std::string unknown;
  for (transfer_id id : ids) {
    auto it = states_.find(id);
    if (it == states_.end()) {
      unknown += (unknown.empty() ? "" : ", ") + std::to_string(id);
      continue;
    }
    known.push_back(id);
    if (it->second.st != poll_state::pending) continue;
    const lane& l = lane_of(it->second.dir);
    if (l.paused) {
      for (const job& j : l.queue) {
        if (j.id == id) {
          return make_error(errc::precondition_failed,
                            "wait: transfer " + std::to_string(id) + " is queued behind paused " +
                                std::string(to_string(it->second.dir)) + " lane");
        }
      }
    }
  }
  done_cv_.wait(lk, [&] {
    for (transfer_id id : known) {
      if (states_.at(id).st == poll_state::pending) return false;
    }
    return true;
  });
  if (!unknown.empty()) {
    return make_error(errc::not_found, "wait: unknown transfer id(s) " + unknown);
  }
  return {};
}

std::vector<transfer_report> sim_copy_engine::take_finished() {
  std::lock_guard lk(mu_);
  std::vector<transfer_report> out;
  out.swap(finished_);
  for (const transfer_report& r : out) states_.erase(r.id);
  return out;
}

void sim_copy_engine::pause(direction dir) {
  std::lock_guard lk(mu_);
  lane_of(dir).paused = true;
}

void sim_copy_engine::resume(direction dir) {
  {
    std::lock_guard lk(mu_);
    lane_of(dir).paused = false;
  }
  lane_of(dir).work_cv.notify_all();
}

}  // namespace kvc::cuda
