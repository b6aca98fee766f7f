// The launcher's check of the file tiers' directories before anything starts: a missing
// root_dir, a file in its place, a read-only file system, a file system smaller than
// capacity_bytes; each named by its key. Then, with the run planned, the room for
// capacity_bytes of every rank of the node: the free space plus what this run's files hold.
#include "launch/config/tier_dirs.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "actors/embed/embed_config.hpp"
#include "disk/file_store.hpp"
#include "launch/config/config_loader.hpp"
#include "tests/disk/scratch_dirs.hpp"

namespace kvc::launch {
namespace {

using kvc::disk::testing::scratch_dir;
using kvc::disk::testing::scratch_mount;

launch_config with_tier(const std::string& root, uint64_t capacity = 1 << 20) {
  launch_config c;
  c.offload.secondary_tiers.push_back({.root_dir = root, .capacity_bytes = capacity});
  return c;
}

TEST(TierDirsTest, NoTierIsFine) {
  EXPECT_TRUE(check_tier_dirs(launch_config{}).ok());
}

TEST(TierDirsTest, AWritableDirectoryIsFine) {
  scratch_dir dir{"/tmp"};
  EXPECT_TRUE(check_tier_dirs(with_tier(dir.path())).ok());
}

TEST(TierDirsTest, AMissingRootDirIsNamedByItsKey) {
  scratch_dir dir{"/tmp"};
  auto c = with_tier(dir.path());
  c.offload.secondary_tiers.push_back({.root_dir = dir.path() + "/absent", .capacity_bytes = 1});
  const status s = check_tier_dirs(c);
  EXPECT_EQ(s.code(), errc::io_error);
  EXPECT_EQ(s.message(),
            "offload.secondary_tiers[1].root_dir: " + dir.path() + "/absent does not exist");
}

TEST(TierDirsTest, AFileInsteadOfADirectoryIsRefused) {
  scratch_dir dir{"/tmp"};
  const std::string file = dir.path() + "/plain";
  { std::ofstream{file} << "x"; }
  const status s = check_tier_dirs(with_tier(file));
  EXPECT_EQ(s.message(), "offload.secondary_tiers[0].root_dir: " + file + " is not a directory");
}

TEST(TierDirsTest, AReadOnlyFileSystemIsRefused) {
  scratch_mount fs{"tmpfs", "size=1m,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  if (!fs.make_read_only()) GTEST_SKIP() << fs.why_not();
  const status s = check_tier_dirs(with_tier(fs.path(), 4096));
  EXPECT_EQ(s.code(), errc::io_error);
  EXPECT_EQ(s.message(),
            "offload.secondary_tiers[0].root_dir: " + fs.path() + " is on a read-only file system");
}

TEST(TierDirsTest, ACapacityLargerThanTheFileSystemIsRefused) {
  scratch_mount fs{"tmpfs", "size=1m,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  EXPECT_TRUE(check_tier_dirs(with_tier(fs.path(), 512 << 10)).ok());
  const status s = check_tier_dirs(with_tier(fs.path(), 2 << 20));
  EXPECT_EQ(s.code(), errc::capacity_exhausted);
  EXPECT_NE(s.message().find("offload.secondary_tiers[0].capacity_bytes: 2097152 bytes do not "
                             "fit the file system of"),
            std::string::npos)
      << s.message();
}

/// The plan of a small run (TP 2 on one node, the default KV geometry shrunk) with one tier of
/// `capacity` bytes in `root`.
launch_plan planned_with_tier(const std::string& root, uint64_t capacity) {
  const std::vector<std::string> sets{"kv_cache.layers=2",
                                      "kv_cache.kv_heads=2",
                                      "kv_cache.head_dim=8",
                                      "kv_cache.gpu_blocks=96",
                                      "offload.cpu_bytes_to_use=64KiB",
                                      "topology.tensor_parallel=2"};
  auto loaded = load_config("", "<test>", sets);
  EXPECT_TRUE(loaded.ok());
  launch_config c = loaded.config;
  c.offload.secondary_tiers.push_back({.root_dir = root, .capacity_bytes = capacity});
  auto plan = make_plan(c, "tierspace", "token");
  EXPECT_TRUE(plan.ok()) << plan.error().to_string();
  return std::move(plan).value();
}

/// A file of `bytes` (allocated: written) at `path`.
void fill(const std::string& path, size_t bytes) {
  std::ofstream{path, std::ios::binary} << std::string(bytes, 'k');
}

TEST(TierSpaceTest, EveryRankOfTheNodeNeedsCapacityBytes) {
  scratch_mount fs{"tmpfs", "size=1m,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  const std::vector<rank_id> both{0, 1}, one{0};
  // 600 KiB fits the 1 MiB file system (check_tier_dirs), once; not for both ranks.
  const auto plan = planned_with_tier(fs.path(), 600 << 10);
  EXPECT_TRUE(check_tier_dirs(with_tier(fs.path(), 600 << 10)).ok());
  EXPECT_TRUE(check_tier_space(plan, one).ok());
  const status s = check_tier_space(plan, both);
  EXPECT_EQ(s.code(), errc::capacity_exhausted);
  EXPECT_NE(s.message().find("offload.secondary_tiers[0].capacity_bytes: 614400 bytes for each of "
                             "the 2 ranks here need 1228800 bytes; the file system of " +
                             fs.path() + " has "),
            std::string::npos)
      << s.message();
  EXPECT_TRUE(check_tier_space(planned_with_tier(fs.path(), 400 << 10), both).ok());
  EXPECT_TRUE(check_tier_space(plan, {}).ok());
}

TEST(TierSpaceTest, ARestartsFilesOfThisRunCountAsRoomOthersDoNot) {
  scratch_mount fs{"tmpfs", "size=1m,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  const auto plan = planned_with_tier(fs.path(), 600 << 10);
  const std::vector<rank_id> rank0{0};
  // Rank 0's directory of this run, as its worker opens it.
  const embed::worker_connector_config& w = plan.workers.at(0);
  auto store = disk::file_store::open({.root_dir = fs.path(),
                                       .run_description = embed::tier_run_description(
                                           *w.file_tier, w.pool, w.topology, w.block_size_factor),
                                       .rank = 0,
                                       .payload_bytes = w.pool.slot_bytes});
  ASSERT_TRUE(store.ok()) << store.error().to_string();
  // 700 KiB of another run's files: 600 KiB no longer fit.
  std::filesystem::create_directories(fs.path() + "/other/0");
  fill(fs.path() + "/other/0/x.kvb", 700 << 10);
  const status s = check_tier_space(plan, rank0);
  EXPECT_EQ(s.code(), errc::capacity_exhausted) << s.message();
  EXPECT_NE(s.message().find("this run's files hold 0"), std::string::npos) << s.message();
  // The same bytes in this run's directory are blocks the tier keeps (or evicts): room.
  std::filesystem::create_directories((*store)->rank_dir() + "/ab");
  std::filesystem::rename(fs.path() + "/other/0/x.kvb", (*store)->rank_dir() + "/ab/x.kvb");
  EXPECT_TRUE(check_tier_space(plan, rank0).ok());
}

}  // namespace
}  // namespace kvc::launch
