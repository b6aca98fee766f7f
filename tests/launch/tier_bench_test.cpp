#include "launch/bench/tier_bench.hpp"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kvc::launch {
namespace {

/// A trimmed report of fio 3.33 (--group_reporting --output-format=json, --rw=read), with a
/// warning line before the JSON as fio prints one for some options.
constexpr const char* fio_read_report = R"(fio: note: both iodepth >= 1 and synchronous I/O engine
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "kvc-bench-tier",
      "error" : 0,
      "read" : {
        "io_bytes" : 1399324672,
        "bw_bytes" : 1397926745,
        "iops" : 5332.667333,
        "clat_ns" : {
          "min" : 100, "max" : 12779520, "mean" : 1500000.0,
          "percentile" : {
            "1.000000" : 452608,
            "50.000000" : 1253376,
            "99.000000" : 5865472
          }
        }
      },
      "write" : { "io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0 }
    }
  ]
}
)";

TEST(TierBenchTest, ReadsFioFiguresOfTheDirectionAsked) {
  auto f = parse_fio_json(fio_read_report, "read");
  ASSERT_TRUE(f.ok()) << f.error().to_string();
  EXPECT_EQ(f->io_bytes, 1399324672u);
  EXPECT_DOUBLE_EQ(f->bytes_per_second, 1397926745.0);
  EXPECT_DOUBLE_EQ(f->clat_p50_us, 1253.376);
  EXPECT_DOUBLE_EQ(f->clat_p99_us, 5865.472);
  // The write side moved nothing in a read run: an error, not a zero figure.
  EXPECT_EQ(parse_fio_json(fio_read_report, "write").code(), errc::io_error);
}

TEST(TierBenchTest, RefusesReportsThatAreNotFiosOrReportAnError) {
  EXPECT_EQ(parse_fio_json("fio: command not found", "read").code(), errc::invalid_argument);
  EXPECT_EQ(parse_fio_json("{\"jobs\": [", "read").code(), errc::invalid_argument);
  EXPECT_EQ(parse_fio_json("{\"jobs\": []}", "read").code(), errc::invalid_argument);
  EXPECT_EQ(parse_fio_json(R"({"jobs": [{"error": 0}]})", "read").code(), errc::invalid_argument);
  EXPECT_EQ(parse_fio_json(R"({"jobs": [{"error": 0, "read": {"bw_bytes": 5}}]})", "read").code(),
            errc::invalid_argument);
  const auto failed = parse_fio_json(
      R"({"jobs": [{"error": 28, "read": {"io_bytes": 1, "bw_bytes": 1}}]})", "read");
  EXPECT_EQ(failed.code(), errc::io_error);
  EXPECT_NE(failed.error().message().find("No space left on device"), std::string::npos)
      << failed.error().message();
}

TEST(TierBenchTest, FioRunsWithTheSameBlockSizeDepthAndJobs) {
  const auto argv = fio_arguments({.fio_path = "/usr/bin/fio",
                                   .directory = "/mnt/x/fio",
                                   .rw = "write",
                                   .block_bytes = 262144,
                                   .queue_depth = 8,
                                   .jobs = 2,
                                   .file_bytes = 1 << 29,
                                   .seconds = 2.5});
  const std::vector<std::string> want{
      "/usr/bin/fio",      "--name=kvc-bench-tier", "--directory=/mnt/x/fio",
      "--direct=1",        "--ioengine=io_uring",   "--rw=write",
      "--bs=262144",       "--iodepth=8",           "--numjobs=2",
      "--size=536870912",  "--time_based",          "--runtime=2.500s",
      "--group_reporting", "--output-format=json"};
  EXPECT_EQ(argv, want);
}

TEST(TierBenchTest, ChecksTheOptionsNamingTheFirstBadOne) {
  tier_bench_options o;
  o.root_dir = "/tmp";
  EXPECT_TRUE(check_tier_bench_options(o).ok());
  const auto message_of = [](const tier_bench_options& x) {
    const status s = check_tier_bench_options(x);
    EXPECT_EQ(s.code(), errc::invalid_argument);
    return s.message();
  };
  auto x = o;
  x.root_dir.clear();
  EXPECT_EQ(message_of(x), "--root-dir: required (a directory on the file system)");
  x = o;
  x.block_bytes = {65536, 1000};
  EXPECT_EQ(message_of(x), "--block-bytes: 1000 is not a multiple of 4096 in [4096, 268435456]");
  x = o;
  x.block_bytes = {};
  EXPECT_EQ(message_of(x), "--block-bytes: at least one size");
  x = o;
  x.queue_depth = 0;
  EXPECT_EQ(message_of(x), "--queue-depth: must be in [1, 4096]");
  x = o;
  x.seconds = 0;
  EXPECT_EQ(message_of(x), "--seconds: must be in (0, 3600]");
  x = o;
  x.working_set_bytes = 8ull << 20;  // 4 blocks of 2 MiB, 8 in flight
  EXPECT_EQ(message_of(x),
            "--working-set-mib: 8 MiB holds fewer blocks of 2097152 bytes than the 8 in flight "
            "(jobs x queue depth)");
  x = o;
  x.engines = {"io_uring", "uring"};
  EXPECT_EQ(message_of(x), "--engines: \"uring\" is not one of auto, io_uring, threads");
  x.engines = {"threads", "threads"};
  EXPECT_EQ(message_of(x), "--engines: \"threads\" given twice");
}

TEST(TierBenchTest, SpreadAndPercentiles) {
  const spread s = spread_of({3, 1, 2, 10});
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 10);
  EXPECT_DOUBLE_EQ(spread_of({4, 1, 9}).median, 4);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(101 - i);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
}

TEST(TierBenchTest, FindsProgramsOnThePathList) {
  EXPECT_EQ(find_program("sh", "/nonexistent:/bin:/usr/bin"), "/bin/sh");
  EXPECT_EQ(find_program("kvc-no-such-program", "/bin:/usr/bin"), std::nullopt);
  EXPECT_EQ(find_program("/bin/sh", ""), "/bin/sh");
  EXPECT_EQ(find_program("/nonexistent/fio", "/bin"), std::nullopt);
  EXPECT_EQ(find_program("sh", ""), std::nullopt);
}

TEST(TierBenchTest, TheScratchDirectoryGoesWithEverythingInIt) {
  std::string path;
  {
    auto scratch = bench_scratch::create("/tmp");
    ASSERT_TRUE(scratch.ok()) << scratch.error().to_string();
    path = scratch->path();
    EXPECT_EQ(path.rfind("/tmp/kvc-bench-tier-", 0), 0u) << path;
    std::filesystem::create_directories(path + "/fio-65536");
    std::ofstream{path + "/fio-65536/kvc-bench-tier.0.0"} << "data";
    bench_scratch moved = std::move(scratch).value();  // the moved-from one removes nothing
    EXPECT_TRUE(std::filesystem::exists(path + "/fio-65536/kvc-bench-tier.0.0"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  auto early = bench_scratch::create("/tmp");
  ASSERT_TRUE(early.ok());
  const std::string early_path = early->path();
  early->remove();
  early->remove();  // idempotent
  EXPECT_FALSE(std::filesystem::exists(early_path));
  const auto refused = bench_scratch::create("/nonexistent-kvc-root");
  EXPECT_EQ(refused.code(), errc::io_error);
  EXPECT_NE(refused.error().message().find("--root-dir /nonexistent-kvc-root"), std::string::npos);
}

}  // namespace
}  // namespace kvc::launch
