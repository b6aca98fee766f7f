#include "launch/bench/tier_bench.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

namespace kvc::launch {

namespace {

constexpr uint64_t page = 4096;

status bad(const std::string& what) {
  return make_error(errc::invalid_argument, what);
}

}  // namespace

status check_tier_bench_options(const tier_bench_options& o) {
  if (o.root_dir.empty()) return bad("--root-dir: required (a directory on the file system)");
  if (o.block_bytes.empty()) return bad("--block-bytes: at least one size");
  for (const uint64_t b : o.block_bytes) {
    if (b == 0 || b % page != 0 || b > (uint64_t{256} << 20)) {
      return bad("--block-bytes: " + std::to_string(b) +
                 " is not a multiple of 4096 in [4096, 268435456]");
    }
  }
  if (o.queue_depth == 0 || o.queue_depth > 4096) return bad("--queue-depth: must be in [1, 4096]");
  if (o.jobs == 0 || o.jobs > 64) return bad("--jobs: must be in [1, 64]");
  if (!(o.seconds > 0 && o.seconds <= 3600)) return bad("--seconds: must be in (0, 3600]");
  if (o.rounds == 0 || o.rounds > 100) return bad("--rounds: must be in [1, 100]");
  const uint64_t in_flight = uint64_t{o.jobs} * o.queue_depth;
  const uint64_t largest = *std::max_element(o.block_bytes.begin(), o.block_bytes.end());
  if (o.working_set_bytes / largest < in_flight) {
    return bad("--working-set-mib: " + std::to_string(o.working_set_bytes >> 20) +
               " MiB holds fewer blocks of " + std::to_string(largest) + " bytes than the " +
               std::to_string(in_flight) + " in flight (jobs x queue depth)");
  }
  if (o.engines.empty()) return bad("--engines: at least one of auto, io_uring, threads");
  std::set<std::string> seen;
  for (const std::string& e : o.engines) {
    if (e != "auto" && e != "io_uring" && e != "threads") {
      return bad("--engines: \"" + e + "\" is not one of auto, io_uring, threads");
    }
    if (!seen.insert(e).second) return bad("--engines: \"" + e + "\" given twice");
  }
  return status::success();
}

std::vector<std::string> fio_arguments(const fio_job& job) {
  char runtime[32];
  std::snprintf(runtime, sizeof runtime, "%.3fs", job.seconds);
  return {job.fio_path,
          "--name=kvc-bench-tier",
          "--directory=" + job.directory,
          "--direct=1",
          "--ioengine=io_uring",
          "--rw=" + job.rw,
          "--bs=" + std::to_string(job.block_bytes),
          "--iodepth=" + std::to_string(job.queue_depth),
          "--numjobs=" + std::to_string(job.jobs),
          "--size=" + std::to_string(job.file_bytes),
          "--time_based",
          std::string{"--runtime="} + runtime,
          "--group_reporting",
          "--output-format=json"};
}

result<fio_figures> parse_fio_json(std::string_view text, std::string_view rw) {
  const size_t start = text.find('{');
  if (start == std::string_view::npos) return bad("fio's report holds no JSON");
  const auto j = nlohmann::json::parse(text.substr(start), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("fio's report is not valid JSON");
  const auto jobs = j.find("jobs");
  if (jobs == j.end() || !jobs->is_array() || jobs->empty() || !jobs->front().is_object()) {
    return bad("fio's report has no jobs");
  }
  const auto& job = jobs->front();
  if (const auto e = job.find("error"); e != job.end() && e->is_number() && e->get<int>() != 0) {
    return make_error(errc::io_error, "fio reports error " + std::to_string(e->get<int>()) + ": " +
                                          std::strerror(e->get<int>()));
  }
  const auto dir = job.find(std::string{rw});
  if (dir == job.end() || !dir->is_object()) {
    return bad("fio's report has no \"" + std::string{rw} + "\" figures");
  }
  const auto number = [&](const nlohmann::json& o, const char* key) -> std::optional<double> {
    const auto it = o.find(key);
    if (it == o.end() || !it->is_number()) return std::nullopt;
    return it->get<double>();
  };
  const auto io_bytes = number(*dir, "io_bytes");
  const auto bw = number(*dir, "bw_bytes");
  if (!io_bytes || !bw) return bad("fio's report lacks io_bytes or bw_bytes");
  if (*io_bytes <= 0) return make_error(errc::io_error, "fio moved no bytes");
  fio_figures f{.io_bytes = static_cast<uint64_t>(*io_bytes), .bytes_per_second = *bw};
  const auto clat = dir->find("clat_ns");
  if (clat != dir->end() && clat->is_object()) {
    const auto pct = clat->find("percentile");
    if (pct != clat->end() && pct->is_object()) {
      f.clat_p50_us = number(*pct, "50.000000").value_or(0) / 1000.0;
      f.clat_p99_us = number(*pct, "99.000000").value_or(0) / 1000.0;
    }
  }
  return f;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(i, values.size() - 1)];
}

spread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  const double median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

std::optional<std::string> find_program(const std::string& name, std::string_view path_list) {
  const auto runnable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return name;
    return std::nullopt;
  }
  while (!path_list.empty()) {
    const size_t colon = path_list.find(':');
    std::string dir{path_list.substr(0, colon)};
    path_list = colon == std::string_view::npos ? std::string_view{} : path_list.substr(colon + 1);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (runnable(candidate)) return candidate;
  }
  return std::nullopt;
}

result<bench_scratch> bench_scratch::create(const std::string& root) {
  std::string pattern = root + "/kvc-bench-tier-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return make_error(errc::io_error, "--root-dir " + root + ": cannot make a scratch directory: " +
                                          std::strerror(errno));
  }
  return bench_scratch{std::move(pattern)};
}

bench_scratch::bench_scratch(bench_scratch&& o) noexcept : path_(std::exchange(o.path_, {})) {}

bench_scratch& bench_scratch::operator=(bench_scratch&& o) noexcept {
  if (this != &o) {
    remove();
    path_ = std::exchange(o.path_, {});
  }
  return *this;
}

bench_scratch::~bench_scratch() {
  remove();
}

void bench_scratch::remove() noexcept {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
  path_.clear();
}

}  // namespace kvc::launch
