// `kvconnect bench copy`: the copy engine moving blocks between "GPU" memory and the shm pool,
// against a plain memcpy of the same bytes between the same buffers, measured in the same run.
//
// Set-up: one prefaulted shm segment (world_size 1, one slot per block, a unique name, removed
// at exit), two device buffers from the engine (the store source and the load destination).
// Each repetition, per direction: clear the destination, copy the working set through the engine
// (one transfer per batch of blocks, one copy_op per block; timed from the first submit to the
// end of wait), verify the destination's checksum against the source's, then memcpy the same
// blocks between the same buffers (timed). The best repetition of each is reported (the machine
// is shared: interference only adds time), the median is shown in the table too. With the
// sim backend the device buffers are host memory, so the memcpy runs between exactly the buffers
// the engine used; with a real GPU device memory is not host-addressable and the memcpy baseline
// runs between the pool and a host buffer of the same size instead.
//
// Each submit() call is timed too (the caller's cost of handing a transfer over); the table and
// the JSON give its p50 / p99 over all timed repetitions (cuda/bench_stats, nearest rank).
//
// Output: a human table, then one JSON object per direction as the last lines.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cuda/bench_stats.hpp"
#include "cuda/engine_factory.hpp"
#include "launch/commands.hpp"
#include "shm/segment.hpp"

namespace kvc::launch {

namespace {

using cuda::copy_engine;
using cuda::copy_op;
using cuda::direction;
using cuda::transfer_id;
using clock_type = std::chrono::steady_clock;

struct copy_options {
  std::string backend = "sim";
  uint64_t slot_bytes = 256 * 1024;
  uint64_t blocks = 0;  ///< 0: a 512 MiB working set
  uint32_t repeat = 5;
  uint32_t batch = 32;  ///< blocks per transfer
};

struct direction_result {
  direction dir;
  double gbps = 0;  ///< best repetition
  double memcpy_gbps = 0;
  double median_gbps = 0;
  double median_memcpy_gbps = 0;
  cuda::latency_summary submit_us;  ///< time in submit(), microseconds
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Order-sensitive 64-bit checksum of `bytes` (a multiple of 8 not required).
uint64_t checksum(const std::byte* p, uint64_t bytes) {
  uint64_t h = 0x84222325cbf29ce4ull;
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull + i;
  }
  for (; i < bytes; ++i) h = (h ^ std::to_integer<uint64_t>(p[i])) * 0x100000001b3ull;
  return h;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double best(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

class copy_bench {
 public:
  explicit copy_bench(const copy_options& opt) : opt_(opt) {}

  status run(std::vector<direction_result>& out) {
    if (auto st = set_up(); !st) return st;
    std::vector<double> engine_s[2], memcpy_s[2], submit_us[2];
    for (uint32_t rep = 0; rep <= opt_.repeat; ++rep) {  // repetition 0 warms up
      for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
        double e = 0, m = 0;
        std::vector<double> submits;
        if (auto st = one_direction(d, e, m, submits); !st) return st;
        if (rep == 0) continue;
        auto& all = submit_us[static_cast<int>(d)];
        all.insert(all.end(), submits.begin(), submits.end());
        engine_s[static_cast<int>(d)].push_back(e);
        memcpy_s[static_cast<int>(d)].push_back(m);
      }
    }
    const double bytes = static_cast<double>(working_set());
    for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
      const auto& e = engine_s[static_cast<int>(d)];
      const auto& m = memcpy_s[static_cast<int>(d)];
      auto submits = cuda::summarize_latency(submit_us[static_cast<int>(d)]);
      if (!submits) return submits.error();
      out.push_back({d, bytes / best(e) / 1e9, bytes / best(m) / 1e9, bytes / median(e) / 1e9,
                     bytes / median(m) / 1e9, *submits});
    }
    return status::success();
  }

  uint64_t working_set() const { return opt_.blocks * opt_.slot_bytes; }

 private:
  status set_up() {
    auto engine = cuda::make_copy_engine({.backend = opt_.backend});
    if (!engine) return engine.error();
    engine_ = std::move(*engine);
    sim_ = engine_->name() == "sim";

    if (opt_.blocks > UINT32_MAX) {
      return make_error(errc::invalid_argument, "--blocks must fit a 32-bit cpu_slot");
    }
    const shm::pool_geometry geo{1, static_cast<uint32_t>(opt_.blocks), opt_.slot_bytes};
    const std::string name =
        shm::segment_name(::getuid(), "bench" + std::to_string(::getpid()), 0);
    auto seg = shm::segment::create(name, geo, {.prefault = true, .remove_on_close = true});
    if (!seg) return seg.error();
    seg_.emplace(std::move(seg).value());
    const auto region = seg_->rank_region(0);
    if (auto st = engine_->register_host(region.data(), region.size(), geo.slot_stride()); !st) {
      return st;
    }

    for (auto* buf : {&src_, &dst_}) {
      auto b = engine_->allocate_device(working_set());
      if (!b) return b.error();
      *buf = *b;
    }
    // Host staging: the pattern to upload, the read-back of loads, zeros to clear with.
    staging_.reset(new (std::nothrow) std::byte[working_set()]);
    if (!staging_) return make_error(errc::capacity_exhausted, "cannot allocate staging memory");
    auto* words = reinterpret_cast<uint64_t*>(staging_.get());
    for (uint64_t i = 0; i < working_set() / 8; ++i) words[i] = splitmix64(i);
    for (uint64_t i = working_set() / 8 * 8; i < working_set(); ++i) {
      staging_[i] = std::byte{static_cast<uint8_t>(i)};
    }
    expected_ = checksum(staging_.get(), working_set());
    if (auto st = engine_->upload(src_.data, staging_.get(), working_set()); !st) return st;
    if (!sim_) {
      // Device memory is not host-addressable: memcpy between the pool and host memory.
      host_mirror_.reset(new (std::nothrow) std::byte[working_set()]);
      if (!host_mirror_) return make_error(errc::capacity_exhausted, "cannot allocate mirror");
      std::memcpy(host_mirror_.get(), staging_.get(), working_set());
    }
    return status::success();
  }

  std::byte* gpu_block(const cuda::device_buffer& b, uint64_t i) const {
    return static_cast<std::byte*>(b.data) + i * opt_.slot_bytes;
  }
  std::byte* memcpy_gpu_block(const cuda::device_buffer& b, uint64_t i) const {
    return sim_ ? gpu_block(b, i) : host_mirror_.get() + i * opt_.slot_bytes;
  }

  /// Clears the destination, runs the engine, verifies, then runs the memcpy baseline.
  /// `submit_us` gets the time of each submit() call in microseconds.
  status one_direction(direction d, double& engine_s, double& memcpy_s,
                       std::vector<double>& submit_us) {
    const bool store = d == direction::gpu_to_cpu;
    const uint64_t n = opt_.blocks;
    if (store) {
      const auto region = seg_->rank_region(0);
      std::memset(region.data(), 0, region.size());
    } else {
      std::memset(staging_.get(), 0, working_set());
      if (auto st = engine_->upload(dst_.data, staging_.get(), working_set()); !st) return st;
    }

    std::vector<copy_op> ops(n);
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* cpu = seg_->slot(0, static_cast<cpu_slot>(i));
      ops[i] = store ? copy_op{gpu_block(src_, i), cpu, opt_.slot_bytes}
                     : copy_op{cpu, gpu_block(dst_, i), opt_.slot_bytes};
    }
    std::vector<transfer_id> ids;
    ids.reserve(n / opt_.batch + 1);
    const auto t0 = clock_type::now();
    for (uint64_t first = 0; first < n; first += opt_.batch) {
      const uint64_t count = std::min<uint64_t>(opt_.batch, n - first);
      // No compute stream here: the copies depend on nothing.
      const auto s0 = clock_type::now();
      auto id = engine_->submit(d, std::span<const copy_op>(ops.data() + first, count),
                                {.no_dependency = true});
      submit_us.push_back(seconds_since(s0) * 1e6);
      if (!id) return id.error();
      ids.push_back(*id);
    }
    if (auto st = engine_->wait(ids); !st) return st;
    engine_s = seconds_since(t0);
    for (const auto& r : engine_->take_finished()) {
      if (!r.ok) {
        return make_error(r.error, "transfer " + std::to_string(r.id) + " failed: " +
                                       (r.detail.empty() ? "no detail" : r.detail));
      }
    }

    uint64_t got = 0;
    if (store) {
      got = slot_checksum();
    } else {
      if (auto st = engine_->download(staging_.get(), dst_.data, working_set()); !st) return st;
      got = checksum(staging_.get(), working_set());
    }
    if (got != expected_) {
      return make_error(errc::internal, std::string(cuda::to_string(d)) +
                                            ": bytes did not round-trip (checksum mismatch)");
    }

    const auto t1 = clock_type::now();
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* cpu = seg_->slot(0, static_cast<cpu_slot>(i));
      if (store) {
        std::memcpy(cpu, memcpy_gpu_block(src_, i), opt_.slot_bytes);
      } else {
        std::memcpy(memcpy_gpu_block(dst_, i), cpu, opt_.slot_bytes);
      }
    }
    memcpy_s = seconds_since(t1);
    return status::success();
  }

  /// Checksum of the pool's slots read in block order (slots may be padded to 4 KiB).
  uint64_t slot_checksum() {
    if (seg_->geometry().slot_stride() == opt_.slot_bytes) {
      return checksum(seg_->pool_base(), working_set());
    }
    for (uint64_t i = 0; i < opt_.blocks; ++i) {
      std::memcpy(staging_.get() + i * opt_.slot_bytes, seg_->slot(0, static_cast<cpu_slot>(i)),
                  opt_.slot_bytes);
    }
    return checksum(staging_.get(), working_set());
  }

  copy_options opt_;
  std::unique_ptr<copy_engine> engine_;
  bool sim_ = true;
  std::optional<shm::segment> seg_;
  cuda::device_buffer src_, dst_;
  std::unique_ptr<std::byte[]> staging_;
  std::unique_ptr<std::byte[]> host_mirror_;
  uint64_t expected_ = 0;
};

void print(const copy_options& opt, uint64_t working_set,
           const std::vector<direction_result>& results) {
  std::printf("copy engine '%s' through the shm pool: %llu blocks x %llu B = %.1f MiB, "
              "%u blocks per transfer, %u repetitions\n",
              opt.backend.c_str(), static_cast<unsigned long long>(opt.blocks),
              static_cast<unsigned long long>(opt.slot_bytes),
              static_cast<double>(working_set) / (1 << 20), opt.batch, opt.repeat);
  std::printf("%-12s %12s %12s %12s %12s %7s %12s %12s\n", "direction", "engine GB/s",
              "(median)", "memcpy GB/s", "(median)", "ratio", "submit p50us", "submit p99us");
  for (const auto& r : results) {
    std::printf("%-12s %12.2f %12.2f %12.2f %12.2f %7.3f %12.2f %12.2f\n",
                std::string(cuda::to_string(r.dir)).c_str(), r.gbps, r.median_gbps,
                r.memcpy_gbps, r.median_memcpy_gbps, r.gbps / r.memcpy_gbps, r.submit_us.p50,
                r.submit_us.p99);
  }
  for (const auto& r : results) {
    std::printf("{\"bench\":\"copy\",\"backend\":\"%s\",\"direction\":\"%s\",\"block_bytes\":%llu,"
                "\"gbps\":%.3f,\"memcpy_gbps\":%.3f,\"ratio\":%.3f,"
                "\"submit_p50_us\":%.3f,\"submit_p99_us\":%.3f}\n",
                opt.backend.c_str(), std::string(cuda::to_string(r.dir)).c_str(),
                static_cast<unsigned long long>(opt.slot_bytes), r.gbps, r.memcpy_gbps,
                r.gbps / r.memcpy_gbps, r.submit_us.p50, r.submit_us.p99);
  }
  std::fflush(stdout);
}

}  // namespace

void add_bench_copy_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<copy_options>();
  auto* cmd = bench_group(app).add_subcommand(
      "copy", "Copy engine GPU<->CPU through a shm pool vs memcpy (JSON line per direction)");
  cmd->add_option("--backend", opt->backend, "copy engine backend: sim or cuda")
      ->capture_default_str();
  cmd->add_option("--slot-bytes", opt->slot_bytes, "bytes per block")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->capture_default_str();
  cmd->add_option("--blocks", opt->blocks, "blocks in the working set (default: 512 MiB worth)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{UINT32_MAX}));
  cmd->add_option("--repeat", opt->repeat, "timed repetitions (best reported)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--batch", opt->batch, "blocks per transfer")
      ->check(CLI::Range(1u, UINT32_MAX))
      ->capture_default_str();
  cmd->callback([opt, &exit_code] {
    copy_options o = *opt;
    if (o.blocks == 0) o.blocks = std::max<uint64_t>(1, (uint64_t{512} << 20) / o.slot_bytes);
    copy_bench bench{o};
    std::vector<direction_result> results;
    if (auto st = bench.run(results); !st) {
      std::cerr << "kvconnect bench copy: " << st.to_string() << "\n";
      exit_code = 1;
      return;
    }
    print(o, bench.working_set(), results);
    exit_code = 0;
  });
}

}  // namespace kvc::launch
