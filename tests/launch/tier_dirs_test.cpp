// The launcher's check of the file tiers' directories before anything starts: a missing
// root_dir, a file in its place, a read-only file system, a file system smaller than
// capacity_bytes; each named by its key.
#include "launch/config/tier_dirs.hpp"

#include <gtest/gtest.h>

#include <fstream>

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

TEST(TierDirsTest, NoTierIsFine) { EXPECT_TRUE(check_tier_dirs(launch_config{}).ok()); }

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

}  // namespace
}  // namespace kvc::launch
