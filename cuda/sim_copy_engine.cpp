#include "cuda/sim_copy_engine.hpp"

#include <chrono>
#include <cstring>
#include <string>

#include "cuda/op_validator.hpp"

namespace kvc::cuda {

namespace {

uintptr_t addr(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace

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
    transfer_report r;
    r.id = j.id;
    r.dir = dir;
    r.ok = true;
    r.bytes = j.bytes;
    r.seconds = std::chrono::duration<double>(t1 - t0).count();
    finished_.push_back(r);
    states_[j.id].st = poll_state::done;
    done_cv_.notify_all();
  }
}

bool sim_copy_engine::in_device(const void* p, size_t bytes) const {
  auto it = buffer_sizes_.upper_bound(addr(p));
  if (it == buffer_sizes_.begin()) return false;
  --it;
  const uintptr_t off = addr(p) - it->first;
  return off <= it->second && bytes <= it->second - off;
}

bool sim_copy_engine::touches_device(const void* p, size_t bytes) const {
  const uintptr_t b = addr(p);
  auto it = buffer_sizes_.upper_bound(b);
  if (it != buffer_sizes_.end() && it->first < b + bytes) return true;
  if (it == buffer_sizes_.begin()) return false;
  --it;
  return b < it->first + it->second;
}

status sim_copy_engine::register_host(void* base, size_t bytes) {
  if (base == nullptr || bytes == 0) {
    return make_error(errc::invalid_argument, "register_host: null base or zero bytes");
  }
  const uintptr_t b = addr(base);
  auto it = host_ranges_.upper_bound(b);
  const bool overlaps_next = it != host_ranges_.end() && it->first < b + bytes;
  const bool overlaps_prev =
      it != host_ranges_.begin() && b < std::prev(it)->first + std::prev(it)->second;
  if (overlaps_next || overlaps_prev) {
    return make_error(errc::invalid_argument,
                      "register_host: range overlaps a range already registered");
  }
  host_ranges_.emplace(b, bytes);
  return {};
}

result<device_buffer> sim_copy_engine::allocate_device(size_t bytes) {
  if (bytes == 0) return make_error(errc::invalid_argument, "allocate_device: zero bytes");
  auto storage = std::unique_ptr<std::byte[]>(new (std::nothrow) std::byte[bytes]);
  if (!storage) {
    return make_error(errc::capacity_exhausted,
                      "allocate_device: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  std::memset(storage.get(), 0xCD, bytes);
  device_buffer buf{storage.get(), bytes};
  buffer_sizes_.emplace(addr(buf.data), bytes);
  buffers_.emplace(addr(buf.data), std::move(storage));
  return buf;
}

status sim_copy_engine::upload(void* device_dst, const void* host_src, size_t bytes) {
  if (host_src == nullptr || !in_device(device_dst, bytes)) {
    return make_error(errc::invalid_argument,
                      "upload: destination is not inside one device buffer or source is null");
  }
  std::memcpy(device_dst, host_src, bytes);
  return {};
}

status sim_copy_engine::download(void* host_dst, const void* device_src, size_t bytes) {
  if (host_dst == nullptr || !in_device(device_src, bytes)) {
    return make_error(errc::invalid_argument,
                      "download: source is not inside one device buffer or destination is null");
  }
  std::memcpy(host_dst, device_src, bytes);
  return {};
}

result<transfer_id> sim_copy_engine::submit(direction dir, std::span<const copy_op> ops,
                                            const submit_options& /*opts*/) {
  if (status s = validate_ops(ops); !s) return s;
  for (size_t k = 0; k < ops.size(); ++k) {
    const copy_op& op = ops[k];
    const void* gpu = dir == direction::gpu_to_cpu ? op.src : op.dst;
    const void* cpu = dir == direction::gpu_to_cpu ? op.dst : op.src;
    if (!in_device(gpu, op.bytes)) {
      return make_error(errc::invalid_argument,
                        "copy op " + std::to_string(k) + " (" + std::string(to_string(dir)) +
                            "): GPU side is not inside one allocated device buffer");
    }
    if (touches_device(cpu, op.bytes)) {
      return make_error(errc::invalid_argument, "copy op " + std::to_string(k) + " (" +
                                                    std::string(to_string(dir)) +
                                                    "): CPU side points into device memory");
    }
  }
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
