#pragma once
/// tier_bench: the pure parts of `kvconnect bench tier` (launch/bench/bench_tier_command.cpp), kept
/// apart so that they are tested without timing anything: the options' checks, fio's command
/// line and the reading of its JSON report, the spread of repeated figures, percentiles, and the
/// scratch directory that holds every file the benchmark writes and is removed on every exit.
/// Thread-safe (no shared state), except bench_scratch (one owner).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/status.hpp"

namespace kvc::launch {

struct tier_bench_options {
  std::string root_dir;  ///< the file system under test; a scratch directory is made inside
  std::vector<uint64_t> block_bytes{65536, 262144, 2097152};  ///< KV bytes per block file
  uint32_t queue_depth = 8;  ///< I/Os in flight per ring (fio: --iodepth)
  uint32_t jobs = 1;         ///< rings (threads) per direction (fio: --numjobs)
  double seconds = 3;        ///< per phase (write, read) and side (fio, kvconnect)
  uint32_t rounds = 3;       ///< repetitions, fio and kvconnect alternating which goes first
  uint64_t working_set_bytes = uint64_t{1} << 30;  ///< bytes of block files (fio: of its files)
  std::vector<std::string> engines{"auto"};        ///< kvconnect's engines measured
  std::string fio = "fio";                         ///< fio's name or path
  uint32_t recycled_files = 32;  ///< file_store_options::recycled_files (0: every write allocates)
  /// Write the working set before each timed write phase (untimed, as fio lays out its file
  /// first), so that every timed write evicts the oldest file and recycles it: the tier's steady
  /// state once it holds capacity_bytes. Off: the timed writes start from an empty directory.
  bool fill_first = false;
  bool json = false;
};

/// The first problem with `o`, as errc::invalid_argument naming the option: block sizes that
/// are not positive page multiples (or over 256 MiB), a working set holding fewer blocks than
/// are in flight at once (jobs x queue_depth), seconds outside (0, 3600], an unknown or
/// repeated engine, no root dir.
status check_tier_bench_options(const tier_bench_options& o);

/// One fio run: `rw` ("write" or "read") of `block_bytes` blocks with O_DIRECT through io_uring.
struct fio_job {
  std::string fio_path;
  std::string directory;  ///< where fio's files go (one per job)
  std::string rw;
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 1;
  uint32_t jobs = 1;
  uint64_t file_bytes = 0;  ///< per job
  double seconds = 1;
};

/// fio's argv (argv[0] = fio_path): --direct=1 --ioengine=io_uring --rw --bs --iodepth
/// --numjobs --size --time_based --runtime, one report for all jobs, JSON on stdout.
std::vector<std::string> fio_arguments(const fio_job& job);

struct fio_figures {
  uint64_t io_bytes = 0;
  double bytes_per_second = 0;
  double clat_p50_us = 0;  ///< completion latency percentiles
  double clat_p99_us = 0;
};

/// Reads fio's --output-format=json report (text before the first '{', such as fio's warnings,
/// is skipped) for direction `rw`. errc::invalid_argument when it is not fio's JSON or lacks the
/// fields; errc::io_error when fio reports a job error or moved no bytes.
result<fio_figures> parse_fio_json(std::string_view text, std::string_view rw);

/// The `p`-th percentile (0..100, nearest rank) of `values`; 0 when empty.
double percentile(std::vector<double> values, double p);

struct spread {
  double median = 0;
  double min = 0;
  double max = 0;
};
spread spread_of(std::vector<double> values);

/// Where `name` is: itself when it holds a '/', otherwise the first executable file of that
/// name in the ':'-separated `path_list` (PATH). std::nullopt when there is none.
std::optional<std::string> find_program(const std::string& name, std::string_view path_list);

/// A fresh directory `<root>/kvc-bench-tier-XXXXXX` (0700), removed with everything in it when
/// the object goes (or by remove(), e.g. from a signal's fast exit). Movable.
class bench_scratch {
 public:
  /// errc::io_error naming root and the reason when the directory cannot be made.
  static result<bench_scratch> create(const std::string& root);
  bench_scratch(bench_scratch&& o) noexcept;
  bench_scratch& operator=(bench_scratch&& o) noexcept;
  bench_scratch(const bench_scratch&) = delete;
  bench_scratch& operator=(const bench_scratch&) = delete;
  ~bench_scratch();

  const std::string& path() const noexcept { return path_; }
  /// Removes the directory and its contents now (idempotent).
  void remove() noexcept;

 private:
  explicit bench_scratch(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kvc::launch
