// `kvconnect bench tier`: the file tier's I/O (block files through disk::file_io) against fio on
// the same file system in the same run.
//
// Per block size and round: fio writes then reads (--direct=1 --ioengine=io_uring, --iodepth =
// --queue-depth, --numjobs = --jobs, --size = the working set split over the jobs), and
// kvconnect writes then reads the same working set as block files (each write a new file: temp
// name + rename over the previous one; each read verified: header, size, CRC-32), keeping jobs x
// queue depth I/Os in flight (io_uring: --jobs rings of --queue-depth; threads: that many
// threads). Each phase runs --seconds. Rounds alternate which side goes first, so that a drift of
// the shared machine does not favour one side; the table gives the median and the range over the
// rounds, the ratio is the median of each round's kvconnect / fio. Promotion latency is a read's
// time from submit to completion (read + verify) at that queue depth; fio's is its completion
// latency.
//
// Every file lives in a scratch directory under --root-dir, removed on every exit: success,
// error, SIGINT/SIGTERM (fio is stopped first; a second signal removes it and exits at once).
// Only SIGKILL leaves it (named kvc-bench-tier-*). fio missing is an error saying how to
// install it.
#include <poll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "disk/file_io.hpp"
#include "disk/uring_ring.hpp"
#include "launch/bench/bench_commands.hpp"
#include "launch/bench/tier_bench.hpp"
#include "launch/process/signal_watcher.hpp"
#include "launch/process/spawned_process.hpp"

extern char** environ;

namespace kvc::launch {

namespace {

using clock_type = std::chrono::steady_clock;

/// One phase of one round of one side.
struct phase_figures {
  double gbps = 0;
  double p50_us = 0;
  double p99_us = 0;
};

/// Figures of one (block size, engine, direction) over the rounds.
struct cell {
  std::vector<double> gbps, fio_gbps, ratio, p50, p99, fio_p50, fio_p99;
};

struct aligned_buffer {
  struct freer {
    void operator()(char* p) const noexcept { std::free(p); }
  };
  explicit aligned_buffer(size_t bytes)
      : mem(static_cast<char*>(std::aligned_alloc(4096, bytes))), size(mem ? bytes : 0) {}
  std::unique_ptr<char, freer> mem;
  size_t size;
};

std::string file_system_of(const std::string& path) {
  struct statfs s {};
  if (::statfs(path.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53:
      return "ext4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x01021994:
      return "tmpfs";
    case 0x858458f6:
      return "ramfs";
    case 0x794c7630:
      return "overlayfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "0x%lx", static_cast<unsigned long>(s.f_type));
      return hex;
    }
  }
}

class tier_bench {
 public:
  tier_bench(const tier_bench_options& o, std::string fio_path, const bench_scratch& scratch,
             signal_watcher& signals, std::atomic<pid_t>& child)
      : o_(o), fio_(std::move(fio_path)), scratch_(scratch), signals_(signals), child_(child) {}

  status run() {
    for (uint32_t round = 0; round < o_.rounds; ++round) {
      for (const uint64_t block : o_.block_bytes) {
        const bool fio_first = round % 2 == 0;
        phase_figures fio_w, fio_r;
        if (fio_first) {
          if (auto s = run_fio(block, fio_w, fio_r); !s) return s;
        }
        std::map<std::string, std::pair<phase_figures, phase_figures>> ours;
        for (const std::string& engine : o_.engines) {
          phase_figures w, r;
          if (auto s = run_ours(block, engine, w, r); !s) return s;
          ours[engine] = {w, r};
        }
        if (!fio_first) {
          if (auto s = run_fio(block, fio_w, fio_r); !s) return s;
        }
        for (const auto& [engine, figures] : ours) {
          add(cells_[{block, engine, "write"}], figures.first, fio_w);
          add(cells_[{block, engine, "read"}], figures.second, fio_r);
        }
      }
    }
    return status::success();
  }

  void print() const {
    if (!o_.json) {
      std::cout << "file tier vs fio on " << o_.root_dir << " (" << file_system_of(o_.root_dir)
                << "), " << fio_version_ << ", queue depth " << o_.queue_depth << " x " << o_.jobs
                << " job(s), " << o_.seconds << " s per phase, " << o_.rounds
                << " round(s), working set " << (o_.working_set_bytes >> 20) << " MiB, "
                << o_.recycled_files << " recycled files"
                << (o_.fill_first ? ", working set written before each write phase" : "") << "\n";
      std::cout << "O_DIRECT: " << (direct_note_.empty() ? "on" : direct_note_) << "\n";
      for (const auto& [engine, note] : engine_notes_) {
        std::cout << "engine " << engine << ": " << note << "\n";
      }
      std::printf("%9s %-9s %-5s %22s %22s %18s %15s %15s\n", "block", "engine", "dir",
                  "kvconnect GB/s", "fio GB/s", "ratio", "kvc p50/p99 us", "fio p50/p99 us");
      for (const auto& [k, c] : cells_) {
        const auto& [block, engine, dir] = k;
        const spread g = spread_of(c.gbps);
        const spread f = spread_of(c.fio_gbps);
        const spread r = spread_of(c.ratio);
        char lat[32] = "-";
        char fio_lat[32] = "-";
        if (dir == "read") {
          std::snprintf(lat, sizeof lat, "%.0f/%.0f", spread_of(c.p50).median,
                        spread_of(c.p99).median);
          std::snprintf(fio_lat, sizeof fio_lat, "%.0f/%.0f", spread_of(c.fio_p50).median,
                        spread_of(c.fio_p99).median);
        }
        std::printf(
            "%9s %-9s %-5s %6.2f [%5.2f, %5.2f] %6.2f [%5.2f, %5.2f] %4.0f%% [%3.0f, %3.0f] "
            "%15s %15s\n",
            std::to_string(block).c_str(), engine.c_str(), dir.c_str(), g.median, g.min, g.max,
            f.median, f.min, f.max, 100 * r.median, 100 * r.min, 100 * r.max, lat, fio_lat);
      }
    }
    for (const auto& [k, c] : cells_) {
      const auto& [block, engine, dir] = k;
      const spread g = spread_of(c.gbps);
      const spread f = spread_of(c.fio_gbps);
      const spread r = spread_of(c.ratio);
      nlohmann::json j{{"bench", "tier"},
                       {"block_bytes", block},
                       {"engine", engine},
                       {"engine_used", engine_used_.at(engine)},
                       {"direction", dir},
                       {"queue_depth", o_.queue_depth},
                       {"jobs", o_.jobs},
                       {"rounds", o_.rounds},
                       {"seconds", o_.seconds},
                       {"direct_io", direct_note_.empty()},
                       {"fill_first", o_.fill_first},
                       {"file_system", file_system_of(o_.root_dir)},
                       {"gbps", {{"median", g.median}, {"min", g.min}, {"max", g.max}}},
                       {"fio_gbps", {{"median", f.median}, {"min", f.min}, {"max", f.max}}},
                       {"ratio", {{"median", r.median}, {"min", r.min}, {"max", r.max}}}};
      if (dir == "read") {
        j["p50_us"] = spread_of(c.p50).median;
        j["p99_us"] = spread_of(c.p99).median;
        j["fio_p50_us"] = spread_of(c.fio_p50).median;
        j["fio_p99_us"] = spread_of(c.fio_p99).median;
      }
      std::cout << j.dump() << "\n";
    }
  }

 private:
  using cell_key = std::tuple<uint64_t, std::string, std::string>;

  static void add(cell& c, const phase_figures& ours, const phase_figures& fio) {
    c.gbps.push_back(ours.gbps);
    c.fio_gbps.push_back(fio.gbps);
    c.ratio.push_back(fio.gbps > 0 ? ours.gbps / fio.gbps : 0);
    c.p50.push_back(ours.p50_us);
    c.p99.push_back(ours.p99_us);
    c.fio_p50.push_back(fio.p50_us);
    c.fio_p99.push_back(fio.p99_us);
  }

  status interrupted() const {
    return make_error(errc::io_error,
                      "interrupted by signal " + std::to_string(signals_.signalled()));
  }

  /// A fresh directory for one side's files of one round, removed by the caller.
  result<std::string> fresh_dir(const std::string& name) const {
    const std::string dir = scratch_.path() + "/" + name;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (::mkdir(dir.c_str(), 0700) != 0) {
      return make_error(errc::io_error, "cannot make " + dir + ": " + std::strerror(errno));
    }
    return dir;
  }

  status run_fio(uint64_t block, phase_figures& write, phase_figures& read) {
    auto dir = fresh_dir("fio-" + std::to_string(block));
    if (!dir) return dir.error();
    const uint64_t per_job = o_.working_set_bytes / o_.jobs / block * block;
    for (const char* rw : {"write", "read"}) {
      const auto argv = fio_arguments({.fio_path = fio_,
                                       .directory = *dir,
                                       .rw = rw,
                                       .block_bytes = block,
                                       .queue_depth = o_.queue_depth,
                                       .jobs = o_.jobs,
                                       .file_bytes = per_job,
                                       .seconds = o_.seconds});
      auto report = run_program(argv);
      if (!report) return report.error();
      auto f = parse_fio_json(*report, rw);
      if (!f)
        return make_error(f.code(), "fio --rw=" + std::string{rw} + ": " + f.error().message());
      if (fio_version_.empty()) {
        const auto j = nlohmann::json::parse(report->substr(report->find('{')), nullptr, false);
        if (j.is_object() && j.contains("fio version")) fio_version_ = j["fio version"];
      }
      phase_figures& p = std::string_view{rw} == "write" ? write : read;
      p = {f->bytes_per_second / 1e9, f->clat_p50_us, f->clat_p99_us};
    }
    std::error_code ec;
    std::filesystem::remove_all(*dir, ec);
    return status::success();
  }

  /// Runs argv to its end; its stdout. fio's stderr goes to ours.
  result<std::string> run_program(const std::vector<std::string>& argv) {
    if (signals_.signalled()) return interrupted();
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    auto child = spawned_process::start(argv, env);
    if (!child) return child.error();
    child_.store(child->pid());
    if (signals_.signalled()) ::kill(child->pid(), SIGTERM);  // a signal raced the start
    std::string out;
    char chunk[65536];
    for (;;) {
      const ssize_t n = ::read(child->stdout_fd(), chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(chunk, static_cast<size_t>(n));
    }
    pollfd p{child->exit_fd(), POLLIN, 0};
    while (::poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    const int code = child->reap();
    child_.store(-1);
    if (signals_.signalled()) return interrupted();
    if (code != 0) {
      return make_error(errc::io_error, argv[0] + " exited with " + std::to_string(code) +
                                            " (its messages are above)");
    }
    return out;
  }

  status run_ours(uint64_t block, const std::string& engine, phase_figures& write,
                  phase_figures& read) {
    auto dir = fresh_dir("kvc-" + engine + "-" + std::to_string(block));
    if (!dir) return dir.error();
    const uint64_t keys = o_.working_set_bytes / block;
    uint64_t written = 0;
    {
      auto store = disk::file_store::open({.root_dir = *dir,
                                           .run_description = "bench tier " + std::to_string(block),
                                           .rank = 0,
                                           .payload_bytes = block,
                                           .direct_io = true,
                                           .recycled_files = o_.recycled_files});
      if (!store) return store.error();
      direct_note_ = (*store)->direct_io_note();
      const auto e = *disk::io_engine_named(engine);
      const bool uring =
          e == disk::io_engine::io_uring ||
          (e == disk::io_engine::automatic && disk::io_uring_unavailable_reason().empty());
      // The same I/Os in flight either way: rings x depth, or that many threads.
      const uint32_t threads = uring ? o_.jobs : o_.jobs * o_.queue_depth;
      auto io = disk::file_io::create(std::move(store).value(), {.n_read_threads = threads,
                                                                 .n_write_threads = threads,
                                                                 .engine = e,
                                                                 .io_depth = o_.queue_depth});
      if (!io) return io.error();
      engine_used_[engine] = std::string{disk::name_of((*io)->engine())};
      engine_notes_[engine] =
          (*io)->engine_note().empty()
              ? "io_uring, " + std::to_string(o_.jobs) + " ring(s) of depth " +
                    std::to_string(o_.queue_depth) + " per direction"
              : (*io)->engine_note() + ", " + std::to_string(threads) + " threads per direction";
      if (o_.fill_first) {
        if (auto s = fill(**io, block, keys, written); !s) return s;
      }
      if (auto s = phase(**io, block, keys, /*writing=*/true, written, write); !s) return s;
      if (auto s = phase(**io, block, std::min(keys, written), false, written, read); !s) {
        return s;
      }
    }
    std::error_code ec;
    std::filesystem::remove_all(*dir, ec);
    return status::success();
  }

  /// --fill-first: writes keys [0, keys) untimed, jobs x queue depth in flight.
  status fill(disk::file_io& io, uint64_t block, uint64_t keys, uint64_t& written) {
    const size_t depth = size_t{o_.jobs} * o_.queue_depth;
    aligned_buffer buffer{block};
    if (buffer.size == 0) return make_error(errc::capacity_exhausted, "no memory");
    std::fill_n(buffer.mem.get(), block, '\x5a');  // only read by the writes: one for all
    size_t in_flight = 0;
    status failed;
    for (;;) {
      while (written < keys && in_flight < depth && failed.ok() && !signals_.signalled()) {
        io.submit_write(written, block_key::from_index(written), {buffer.mem.get(), block});
        ++written;
        ++in_flight;
      }
      if (in_flight == 0) break;
      for (const disk::io_completion& c : io.wait_completions()) {
        if (!c.outcome && failed.ok()) failed = c.outcome;
        --in_flight;
      }
    }
    if (!failed) return failed;
    if (signals_.signalled()) return interrupted();
    return status::success();
  }

  /// Keeps jobs x queue depth I/Os in flight for --seconds. Writing: each write a new key, and
  /// once `keys` files exist the oldest is removed first (the tier's capacity eviction; the
  /// removal's file is recycled by a later write). Reading: the `keys` newest keys, cycling.
  status phase(disk::file_io& io, uint64_t block, uint64_t keys, bool writing, uint64_t& written,
               phase_figures& out) {
    const size_t depth = size_t{o_.jobs} * o_.queue_depth;
    std::vector<aligned_buffer> buffers;
    for (size_t i = 0; i < depth; ++i) {
      buffers.emplace_back(block);
      if (buffers.back().size == 0) return make_error(errc::capacity_exhausted, "no memory");
      for (size_t j = 0; j < block; j += 64) buffers.back().mem.get()[j] = static_cast<char>(i + j);
    }
    std::vector<size_t> free(depth);
    for (size_t i = 0; i < depth; ++i) free[i] = i;
    std::vector<clock_type::time_point> started(depth);
    std::vector<double> latencies_us;
    const uint64_t first = writing ? written : written - keys;  // the oldest key on disk
    uint64_t bytes = 0;
    uint64_t next = 0;
    uint64_t removals = 0;  // in flight
    const auto t0 = clock_type::now();
    const auto deadline = t0 + std::chrono::duration<double>(o_.seconds);
    status failed;
    for (;;) {
      while (!free.empty() && failed.ok() && !signals_.signalled() &&
             clock_type::now() < deadline) {
        const size_t b = free.back();
        free.pop_back();
        started[b] = clock_type::now();
        std::span<char> mem{buffers[b].mem.get(), block};
        if (writing) {
          const uint64_t k = first + next++;
          if (k >= keys) {
            io.submit_remove(depth, block_key::from_index(k - keys));
            ++removals;
          }
          io.submit_write(b, block_key::from_index(k), mem);
        } else {
          io.submit_read(b, block_key::from_index(first + next++ % keys), mem);
        }
      }
      if (free.size() == depth && removals == 0) break;
      for (const disk::io_completion& c : io.wait_completions()) {
        if (!c.outcome && failed.ok()) failed = c.outcome;
        if (c.kind == disk::io_kind::remove) {
          --removals;
          continue;
        }
        const auto now = clock_type::now();
        latencies_us.push_back(
            std::chrono::duration<double, std::micro>(now - started[c.ticket]).count());
        free.push_back(c.ticket);
        bytes += c.bytes;
      }
    }
    const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (!failed) return failed;
    if (signals_.signalled()) return interrupted();
    if (writing) written += next;
    out = {bytes / seconds / 1e9, percentile(latencies_us, 50), percentile(latencies_us, 99)};
    return status::success();
  }

  const tier_bench_options& o_;
  std::string fio_;
  const bench_scratch& scratch_;
  signal_watcher& signals_;
  std::atomic<pid_t>& child_;
  std::map<cell_key, cell> cells_;
  std::map<std::string, std::string> engine_used_;
  std::map<std::string, std::string> engine_notes_;
  std::string direct_note_;
  std::string fio_version_;
};

}  // namespace

void add_bench_tier_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<tier_bench_options>();
  auto working_set_mib = std::make_shared<uint64_t>(opt->working_set_bytes >> 20);
  auto* cmd = bench_group(app).add_subcommand(
      "tier", "The file tier's block I/O vs fio on the same file system (JSON line per cell)");
  cmd->add_option("--root-dir", opt->root_dir, "a directory on the file system to measure")
      ->required();
  cmd->add_option("--block-bytes", opt->block_bytes, "KV bytes per block, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--queue-depth", opt->queue_depth, "I/Os in flight per ring (fio --iodepth)")
      ->capture_default_str();
  cmd->add_option("--jobs", opt->jobs, "rings (threads) per direction (fio --numjobs)")
      ->capture_default_str();
  cmd->add_option("--seconds", opt->seconds, "seconds per phase and side")->capture_default_str();
  cmd->add_option("--rounds", opt->rounds, "rounds, alternating fio and kvconnect")
      ->capture_default_str();
  cmd->add_option("--working-set-mib", *working_set_mib, "MiB of block files per block size")
      ->capture_default_str();
  cmd->add_option("--engines", opt->engines, "kvconnect engines: auto, io_uring, threads")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--fio", opt->fio, "fio's name or path")->capture_default_str();
  cmd->add_option("--recycled-files", opt->recycled_files,
                  "removed block files kept for writes to overwrite (0: each write allocates)")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  cmd->add_flag("--fill-first", opt->fill_first,
                "write the working set before each timed write phase (untimed), so that every "
                "timed write evicts and recycles a file: the tier's steady state");
  cmd->add_flag("--json", opt->json, "print only the JSON lines");
  cmd->callback([opt, working_set_mib, &exit_code] {
    tier_bench_options o = *opt;
    o.working_set_bytes = *working_set_mib << 20;
    if (auto s = check_tier_bench_options(o); !s) {
      std::cerr << "kvconnect bench tier: " << s.message() << "\n";
      exit_code = 2;
      return;
    }
    const char* path = std::getenv("PATH");
    const auto fio = find_program(o.fio, path ? path : "");
    if (!fio) {
      std::cerr << "kvconnect bench tier: fio not found (\"" << o.fio
                << "\"): install it (Debian: apt-get install fio, or scripts/deps as root) or "
                   "name it with --fio PATH\n";
      exit_code = 2;
      return;
    }
    signal_watcher signals;  // before file_io starts threads: they inherit the blocked mask
    auto scratch = bench_scratch::create(o.root_dir);
    if (!scratch) {
      std::cerr << "kvconnect bench tier: " << scratch.error().message() << "\n";
      exit_code = 2;
      return;
    }
    std::atomic<pid_t> child{-1};
    signals.on_signal([&child](int) {
      if (const pid_t p = child.load(); p > 0) ::kill(p, SIGTERM);
    });
    signals.on_second_signal([dir = scratch->path()] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
    tier_bench bench{o, *fio, *scratch, signals, child};
    const status s = bench.run();
    signals.on_signal(nullptr);
    scratch->remove();
    if (!s) {
      std::cerr << "kvconnect bench tier: " << s.message() << "\n";
      exit_code = signals.signalled() ? 128 + signals.signalled() : 1;
      return;
    }
    bench.print();
    exit_code = 0;
  });
}

}  // namespace kvc::launch
