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
// Shapes (`--shapes vllm`, the default): the same run over vLLM-like transfer shapes (R regions
// x n pages of 16/32/64 KiB, and 2 MiB blocks; cuda/copy_bench_stats): a block's slot holds its
// page of every region, one copy_op per (region, block). Per shape and direction it reports the
// engine's GB/s, the ceiling (cuda: dma_probe's one cudaMemcpyAsync of the whole set, pinned
// host memory; sim: one memcpy of the whole set between the same buffers), the ratio to it, the
// per-page baseline (cuda: a cudaMemcpyAsync loop; sim: a memcpy loop), the time spent inside
// submit() (p50/p99 over every submit of the timed repetitions) and the engine's batched
// transfers. `--shapes single` runs one shape of --slot-bytes blocks in one region.
//
// Output: a human table, then one JSON object per shape and direction as the last lines (only
// those with --json).
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

#include "cuda/copy_bench_stats.hpp"
#include "cuda/dma_probe.hpp"
#include "cuda/engine_factory.hpp"
#include "launch/bench/bench_commands.hpp"
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
  int device = 0;
  std::string shapes = "vllm";  ///< "vllm" or "single"
  uint32_t regions = 32;        ///< vllm shapes: KV regions (layers x K/V)
  uint64_t working_set_mib = 256;
  uint64_t slot_bytes = 256 * 1024;
  uint64_t blocks = 0;  ///< single: 0 = a 512 MiB working set
  uint32_t repeat = 5;
  uint32_t batch = 32;  ///< blocks per transfer
  std::string copy_path = "memcpy";  ///< cuda: memcpy, kernel or auto (cuda::copy_path)
  bool json = false;
};

struct direction_result {
  std::string shape;
  uint64_t page_bytes = 0;
  direction dir;
  double gbps = 0;  ///< best repetition
  double memcpy_gbps = 0;  ///< per-page baseline
  double median_gbps = 0;
  double median_memcpy_gbps = 0;
  double ceiling_gbps = 0;
  double submit_p50_us = 0;
  double submit_p99_us = 0;
  uint64_t batched = 0;
  uint64_t kernel = 0;    ///< transfers the gather kernel copied
  uint64_t fallback = 0;  ///< transfers given the kernel that went by memcpy (no free slot)
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
  copy_bench(const copy_options& opt, cuda::copy_shape shape) : opt_(opt), shape_(std::move(shape)) {
    opt_.blocks = shape_.blocks;
    opt_.slot_bytes = shape_.regions * shape_.page_bytes;
  }

  status run(std::vector<direction_result>& out) {
    if (auto st = set_up(); !st) return st;
    std::vector<double> engine_s[2], memcpy_s[2], ceiling_s[2];
    std::vector<double> submit_us;
    for (uint32_t rep = 0; rep <= opt_.repeat; ++rep) {  // repetition 0 warms up
      for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
        const int k = static_cast<int>(d);
        double e = 0, m = 0, c = 0;
        submits_us_.clear();
        if (auto st = one_direction(d, e, m, c); !st) return st;
        if (rep == 0) continue;
        engine_s[k].push_back(e);
        memcpy_s[k].push_back(m);
        ceiling_s[k].push_back(c);
        submit_by_dir_[k].insert(submit_by_dir_[k].end(), submits_us_.begin(), submits_us_.end());
      }
    }
    result<cuda::dma_probe_result> probe = cuda::dma_probe_result{};
    if (!sim_) {
      probe = cuda::run_dma_probe({.device = opt_.device, .bytes = working_set(),
                                   .page_bytes = shape_.page_bytes, .repeat = opt_.repeat});
      if (!probe) return probe.error();
      bidirectional_gbps_ = probe->bidirectional;
    }
    const uint64_t bytes = working_set();
    for (direction d : {direction::gpu_to_cpu, direction::cpu_to_gpu}) {
      const int k = static_cast<int>(d);
      const auto& e = engine_s[k];
      const auto& m = memcpy_s[k];
      direction_result r{shape_.label, shape_.page_bytes, d,
                         cuda::gbps(bytes, best(e)), cuda::gbps(bytes, best(m)),
                         cuda::gbps(bytes, median(e)), cuda::gbps(bytes, median(m))};
      if (sim_) {
        r.ceiling_gbps = cuda::gbps(bytes, best(ceiling_s[k]));
      } else {
        const bool store = d == direction::gpu_to_cpu;
        r.ceiling_gbps = store ? probe->d2h_whole : probe->h2d_whole;
        r.memcpy_gbps = r.median_memcpy_gbps = store ? probe->d2h_per_page : probe->h2d_per_page;
      }
      auto p50 = cuda::percentile(submit_by_dir_[k], 50);
      auto p99 = cuda::percentile(submit_by_dir_[k], 99);
      if (!p50 || !p99) return p50 ? p99.error() : p50.error();
      r.submit_p50_us = *p50;
      r.submit_p99_us = *p99;
      r.batched = engine_->batched_transfers();
      r.kernel = engine_->kernel_transfers();
      r.fallback = engine_->kernel_fallbacks();
      out.push_back(r);
    }
    return status::success();
  }

  uint64_t working_set() const { return opt_.blocks * opt_.slot_bytes; }
  /// cuda: both directions at once (dma_probe), GB/s; 0 with sim.
  double bidirectional_gbps() const { return bidirectional_gbps_; }

 private:
  status set_up() {
    auto path = cuda::parse_copy_path(opt_.copy_path);
    if (!path) return path.error();
    if (*path != cuda::copy_path::memcpy && opt_.backend != "cuda") {
      return make_error(errc::invalid_argument,
                        "--copy-path " + opt_.copy_path + " needs --backend cuda (the gather "
                        "kernel is a CUDA kernel)");
    }
    cuda::engine_options eo{.backend = opt_.backend, .device = opt_.device};
    eo.path = *path;
    auto engine = cuda::make_copy_engine(eo);
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

  /// Clears the destination, runs the engine, verifies, then runs the memcpy baseline.
  status one_direction(direction d, double& engine_s, double& memcpy_s, double& ceiling_s) {
    const bool store = d == direction::gpu_to_cpu;
    const uint64_t n = opt_.blocks;
    if (store) {
      const auto region = seg_->rank_region(0);
      std::memset(region.data(), 0, region.size());
    } else {
      std::memset(staging_.get(), 0, working_set());
      if (auto st = engine_->upload(dst_.data, staging_.get(), working_set()); !st) return st;
    }

    // Region r of block i: GPU page at r * n + i (one tensor per region, as vLLM's KV cache),
    // CPU bytes at r * page inside slot i (a block's slot holds its page of every region).
    const uint64_t page = shape_.page_bytes, regions = shape_.regions;
    std::vector<copy_op> ops(n * regions);
    for (uint64_t i = 0; i < n; ++i) {
      std::byte* cpu = seg_->slot(0, static_cast<cpu_slot>(i));
      for (uint64_t r = 0; r < regions; ++r) {
        std::byte* gpu = static_cast<std::byte*>(store ? src_.data : dst_.data) + (r * n + i) * page;
        ops[i * regions + r] = store ? copy_op{gpu, cpu + r * page, page}
                                     : copy_op{cpu + r * page, gpu, page};
      }
    }
    std::vector<transfer_id> ids;
    ids.reserve(n / opt_.batch + 1);
    const auto t0 = clock_type::now();
    for (uint64_t first = 0; first < n; first += opt_.batch) {
      const uint64_t count = std::min<uint64_t>(opt_.batch, n - first);
      // No compute stream here: the copies depend on nothing.
      const auto s0 = clock_type::now();
      auto id = engine_->submit(
          d, std::span<const copy_op>(ops.data() + first * regions, count * regions),
          {.no_dependency = true});
      submits_us_.push_back(seconds_since(s0) * 1e6);
      if (!id) return id.error();
      ids.push_back(*id);
    }
    if (auto st = engine_->wait(ids); !st) return st;
    engine_s = seconds_since(t0);
    for (const auto& r : engine_->take_finished()) {
      if (!r.ok) {
        return make_error(r.error, "transfer " + std::to_string(r.id) + " failed");
      }
    }

    uint64_t got = 0;
    if (store) {
      got = slot_checksum(ops);
    } else {
      if (auto st = engine_->download(staging_.get(), dst_.data, working_set()); !st) return st;
      got = checksum(staging_.get(), working_set());
    }
    if (got != expected_) {
      return make_error(errc::internal, std::string(cuda::to_string(d)) +
                                            ": bytes did not round-trip (checksum mismatch)");
    }

    // The per-page baseline: a memcpy per op, between the same buffers (sim) or between the
    // pool and a host mirror of the GPU buffer (cuda; its dma_probe gives the device figures).
    const auto t1 = clock_type::now();
    for (const copy_op& op : ops) {
      if (sim_) {
        std::memcpy(op.dst, op.src, op.bytes);
      } else {
        const auto* dev = static_cast<const std::byte*>(store ? op.src : op.dst);
        const uint64_t off = static_cast<uint64_t>(
            dev - static_cast<const std::byte*>(store ? src_.data : dst_.data));
        if (store) {
          std::memcpy(op.dst, host_mirror_.get() + off, op.bytes);
        } else {
          std::memcpy(host_mirror_.get() + off, op.src, op.bytes);
        }
      }
    }
    memcpy_s = seconds_since(t1);

    // The ceiling with sim: one memcpy of the whole set (the pool's slots are contiguous here:
    // slot_bytes is a multiple of 16 KiB, so no padding).
    const auto t2 = clock_type::now();
    if (sim_) {
      std::byte* pool = seg_->slot(0, 0);
      if (store) {
        std::memcpy(pool, src_.data, working_set());
      } else {
        std::memcpy(dst_.data, pool, working_set());
      }
    }
    ceiling_s = seconds_since(t2);
    // The whole-set copy wrote the pool in GPU order: put the slots back for the next load.
    if (sim_ && store) {
      for (const copy_op& op : ops) std::memcpy(op.dst, op.src, op.bytes);
    }
    return status::success();
  }

  /// Checksum of the pool read back in GPU order (op by op: the ops are in that layout's order
  /// only after sorting by source address).
  uint64_t slot_checksum(const std::vector<copy_op>& ops) {
    for (const copy_op& op : ops) {
      const uint64_t off = static_cast<uint64_t>(static_cast<const std::byte*>(op.src) -
                                                 static_cast<const std::byte*>(src_.data));
      std::memcpy(staging_.get() + off, op.dst, op.bytes);
    }
    return checksum(staging_.get(), working_set());
  }

  copy_options opt_;
  cuda::copy_shape shape_;
  std::vector<double> submits_us_;        ///< this pass's submit() times, microseconds
  std::vector<double> submit_by_dir_[2];  ///< every timed pass's, by direction
  double bidirectional_gbps_ = 0;
  std::unique_ptr<copy_engine> engine_;
  bool sim_ = true;
  std::optional<shm::segment> seg_;
  cuda::device_buffer src_, dst_;
  std::unique_ptr<std::byte[]> staging_;
  std::unique_ptr<std::byte[]> host_mirror_;
  uint64_t expected_ = 0;
};

void print(const copy_options& opt, const std::vector<direction_result>& results,
           double bidirectional_gbps, uint64_t working_set) {
  if (!opt.json) {
    std::printf("copy engine '%s' (device %d, copy path %s) through the shm pool: %.1f MiB "
                "per shape, %u blocks per transfer, %u repetitions (best; median in brackets)\n",
                opt.backend.c_str(), opt.device, opt.copy_path.c_str(),
                static_cast<double>(working_set) / (1 << 20), opt.batch, opt.repeat);
    std::printf("%-18s %-11s %9s %9s %9s %7s %9s %9s %9s %8s %8s %8s\n", "shape", "direction",
                "engine", "(median)", "ceiling", "ratio", "per-page", "submit50", "submit99",
                "batched", "kernel", "fallback");
    for (const auto& r : results) {
      std::printf("%-18s %-11s %9.2f %9.2f %9.2f %7.3f %9.2f %8.1fus %8.1fus %8llu %8llu %8llu\n",
                  r.shape.c_str(), std::string(cuda::to_string(r.dir)).c_str(), r.gbps,
                  r.median_gbps, r.ceiling_gbps, cuda::ratio_to_ceiling(r.gbps, r.ceiling_gbps),
                  r.memcpy_gbps, r.submit_p50_us, r.submit_p99_us,
                  static_cast<unsigned long long>(r.batched),
                  static_cast<unsigned long long>(r.kernel),
                  static_cast<unsigned long long>(r.fallback));
    }
    if (bidirectional_gbps > 0) {
      std::printf("both directions at once (raw cudaMemcpyAsync, two streams): %.2f GB/s\n",
                  bidirectional_gbps);
    }
  }
  for (const auto& r : results) {
    std::printf("{\"bench\":\"copy\",\"backend\":\"%s\",\"shape\":\"%s\",\"direction\":\"%s\","
                "\"page_bytes\":%llu,\"gbps\":%.3f,\"ceiling_gbps\":%.3f,\"ratio\":%.3f,"
                "\"per_page_gbps\":%.3f,\"submit_p50_us\":%.2f,\"submit_p99_us\":%.2f,"
                "\"batched_transfers\":%llu,\"copy_path\":\"%s\",\"kernel_transfers\":%llu,"
                "\"kernel_fallbacks\":%llu}\n",
                opt.backend.c_str(), r.shape.c_str(), std::string(cuda::to_string(r.dir)).c_str(),
                static_cast<unsigned long long>(r.page_bytes), r.gbps, r.ceiling_gbps,
                cuda::ratio_to_ceiling(r.gbps, r.ceiling_gbps), r.memcpy_gbps, r.submit_p50_us,
                r.submit_p99_us, static_cast<unsigned long long>(r.batched),
                opt.copy_path.c_str(), static_cast<unsigned long long>(r.kernel),
                static_cast<unsigned long long>(r.fallback));
  }
  if (bidirectional_gbps > 0) {
    std::printf("{\"bench\":\"copy\",\"backend\":\"%s\",\"shape\":\"bidirectional\","
                "\"gbps\":%.3f}\n", opt.backend.c_str(), bidirectional_gbps);
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
  cmd->add_option("--copy-path", opt->copy_path,
                  "cuda: memcpy (DMA engines), kernel (one gather-kernel launch per transfer) "
                  "or auto (the kernel for transfers of small pages)")
      ->check(CLI::IsMember({"memcpy", "kernel", "auto"}))
      ->capture_default_str();
  cmd->add_option("--device", opt->device, "CUDA device ordinal")
      ->check(CLI::Range(0, 1023))
      ->capture_default_str();
  cmd->add_option("--shapes", opt->shapes,
                  "vllm: R regions x 16/32/64 KiB pages and 2 MiB blocks; single: --slot-bytes")
      ->check(CLI::IsMember({"vllm", "single"}))
      ->capture_default_str();
  cmd->add_option("--regions", opt->regions, "vllm shapes: KV regions (layers x K/V)")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  cmd->add_option("--working-set-mib", opt->working_set_mib, "vllm shapes: MiB per shape")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("--slot-bytes", opt->slot_bytes, "single: bytes per block")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))
      ->capture_default_str();
  cmd->add_option("--blocks", opt->blocks, "single: blocks (default: 512 MiB worth)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{UINT32_MAX}));
  cmd->add_option("--repeat", opt->repeat, "timed repetitions (best reported)")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  cmd->add_option("--batch", opt->batch, "blocks per transfer")
      ->check(CLI::Range(1u, UINT32_MAX))
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "print only the JSON lines");
  cmd->callback([opt, &exit_code] {
    copy_options o = *opt;
    std::vector<cuda::copy_shape> shapes;
    if (o.shapes == "single") {
      const uint64_t blocks =
          o.blocks ? o.blocks : std::max<uint64_t>(1, (uint64_t{512} << 20) / o.slot_bytes);
      shapes.push_back({std::to_string(o.slot_bytes) + "B", 1, static_cast<uint32_t>(blocks),
                        o.slot_bytes});
    } else {
      auto s = cuda::vllm_like_shapes(o.working_set_mib << 20, o.regions);
      if (!s) {
        std::cerr << "kvconnect bench copy: " << s.error().to_string() << "\n";
        exit_code = 1;
        return;
      }
      shapes = std::move(*s);
    }
    std::vector<direction_result> results;
    double bidirectional = 0;
    uint64_t working_set = 0;
    for (const auto& shape : shapes) {
      copy_bench bench{o, shape};
      if (auto st = bench.run(results); !st) {
        std::cerr << "kvconnect bench copy: " << shape.label << ": " << st.to_string() << "\n";
        exit_code = 1;
        return;
      }
      bidirectional = std::max(bidirectional, bench.bidirectional_gbps());
      working_set = std::max(working_set, bench.working_set());
    }
    print(o, results, bidirectional, working_set);
    exit_code = 0;
  });
}

}  // namespace kvc::launch
