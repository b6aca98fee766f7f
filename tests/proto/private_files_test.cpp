// proto/private_files.hpp: what a run writes to disk is the owner's alone. Missing directories
// are made 0700 (parents too), an existing one is left as it is, and what is in the way (a
// file, a symlink loop) is one io_error naming the directory; files are created 0600, an
// existing file's mode included. The umask is set to the common 022 for the test, so that the
// modes asserted are what the functions asked for.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "proto/private_files.hpp"

namespace kvc {
namespace {

namespace fs = std::filesystem;

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

class PrivateFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    old_umask_ = ::umask(022);
    dir_ = fs::temp_directory_path() /
           ("kvc-private-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms{0755});
  }
  void TearDown() override {
    fs::remove_all(dir_);
    ::umask(old_umask_);
  }
  fs::path dir_;
  mode_t old_umask_ = 0;
};

TEST_F(PrivateFilesTest, MissingDirectoriesAreMade0700AndAnExistingOneIsLeftAsItIs) {
  const fs::path nested = dir_ / "a" / "b" / "c";
  ASSERT_TRUE(make_private_dir(nested.string())) << nested;
  EXPECT_EQ(mode_of(dir_ / "a"), 0700u);
  EXPECT_EQ(mode_of(dir_ / "a" / "b"), 0700u);
  EXPECT_EQ(mode_of(nested), 0700u);
  EXPECT_EQ(mode_of(dir_), 0755u);  // it was there
  // Again, and with a trailing slash: nothing to do.
  EXPECT_TRUE(make_private_dir(nested.string() + "/"));
}

TEST_F(PrivateFilesTest, WhatIsInTheWayIsOneErrorNamingTheDirectory) {
  std::ofstream{dir_ / "file"} << "x";
  const fs::path file = dir_ / "file";
  const fs::path under = file / "sub";
  auto st = make_private_dir(file.string());
  ASSERT_FALSE(st);
  EXPECT_EQ(st.code(), errc::io_error);
  EXPECT_EQ(st.message(), "cannot create the directory " + file.string() +
                              ": a file of that name is in the way");
  auto sub = make_private_dir(under.string() + "/");
  ASSERT_FALSE(sub);
  EXPECT_EQ(sub.message(), "cannot create the directory " + under.string() + "/: Not a directory");
  fs::create_symlink(dir_ / "loop", dir_ / "loop");
  auto loop = make_private_dir((dir_ / "loop").string());
  ASSERT_FALSE(loop);
  EXPECT_NE(loop.message().find("symbolic links"), std::string::npos) << loop.message();
  EXPECT_FALSE(make_private_dir(""));
}

TEST_F(PrivateFilesTest, FilesAreCreated0600AndAnExistingFileBecomes0600) {
  const fs::path fresh = dir_ / "fresh.jsonl";
  auto fd = create_private_file(fresh.string());
  ASSERT_TRUE(fd) << fd.error().to_string();
  ASSERT_EQ(::write(*fd, "abc", 3), 3);
  ::close(*fd);
  EXPECT_EQ(mode_of(fresh), 0600u);

  const fs::path old = dir_ / "old.kvcrec";
  std::ofstream{old} << "some older content";
  fs::permissions(old, fs::perms{0644});
  auto again = create_private_file(old.string());
  ASSERT_TRUE(again) << again.error().to_string();
  ::close(*again);
  EXPECT_EQ(mode_of(old), 0600u);
  EXPECT_EQ(fs::file_size(old), 0u);  // truncated

  auto missing = create_private_file((dir_ / "no" / "such" / "dir.jsonl").string());
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), errc::io_error);
  EXPECT_NE(missing.error().message().find("dir.jsonl"), std::string::npos);
}

}  // namespace
}  // namespace kvc
