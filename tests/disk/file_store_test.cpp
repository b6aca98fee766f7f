#include "disk/file_store.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "tests/disk/scratch_dirs.hpp"

namespace kvc::disk {
namespace {

using testing::scratch_dir;
using testing::scratch_mount;

constexpr uint64_t payload = 10'000;  // not a page multiple: the padding is exercised

block_key key(uint64_t i) { return block_key::from_index(i); }

/// Deterministic KV bytes of block i.
std::vector<char> kv(uint64_t i, uint64_t bytes = payload) {
  std::vector<char> v(bytes);
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<char>(block_key::mix(i * 7919 + j));
  return v;
}

file_store_options options(const std::string& root, std::string run = "model=m;block=16") {
  return {.root_dir = root, .run_description = std::move(run), .rank = 1,
          .payload_bytes = payload};
}

std::unique_ptr<file_store> open_ok(const file_store_options& o) {
  auto s = file_store::open(o);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

/// Copies a block file by hand to `to` (its shard directory made if it is not there yet).
void copy_by_hand(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(std::filesystem::path{to}.parent_path());
  std::filesystem::copy_file(from, to);
}

/// Writes a file by hand at `path` (its shard directory made if it is not there yet).
void put_by_hand(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path{path}.parent_path());
  std::ofstream{path} << text;
}

/// Flips one byte of a file at `offset`.
void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f{path, std::ios::in | std::ios::out | std::ios::binary};
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x01);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

/// The file store's contract on the machine's disk (/tmp) and on tmpfs (/dev/shm).
class FileStoreTest : public ::testing::TestWithParam<const char*> {
 protected:
  scratch_dir dir_{GetParam()};
};

TEST_P(FileStoreTest, RoundTripsBlocksByteForByte) {
  ASSERT_FALSE(dir_.path().empty());
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(store->write(key(i), kv(i)).ok());
  for (uint64_t i = 0; i < 4; ++i) {
    std::vector<char> back(payload);
    ASSERT_TRUE(store->read(key(i), back).ok());
    EXPECT_EQ(back, kv(i));
    EXPECT_TRUE(store->check(key(i)).ok());
  }
  EXPECT_EQ(std::filesystem::file_size(store->path_of(key(0))), file_bytes(payload));
}

TEST_P(FileStoreTest, MissingBlockIsNotFound) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  std::vector<char> back(payload);
  EXPECT_EQ(store->read(key(9), back).code(), errc::not_found);
  EXPECT_EQ(store->check(key(9)).code(), errc::not_found);
  EXPECT_TRUE(store->remove(key(9)).ok());
}

TEST_P(FileStoreTest, FilesArePrivate) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->write(key(1), kv(1)).ok());
  EXPECT_EQ(mode_of(store->path_of(key(1))), 0600u);
  EXPECT_EQ(mode_of(store->rank_dir()), 0700u);
  EXPECT_EQ(mode_of(std::filesystem::path{store->path_of(key(1))}.parent_path()), 0700u);
  const auto run_dir = std::filesystem::path{store->rank_dir()}.parent_path();
  EXPECT_EQ(mode_of(run_dir), 0700u);
  EXPECT_EQ(mode_of((run_dir / "config.txt").string()), 0600u);
}

TEST_P(FileStoreTest, ATornFileIsRefusedAndRemoved) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->write(key(1), kv(1)).ok());
  ASSERT_TRUE(store->write(key(2), kv(2)).ok());
  // A crash mid-write under the final name (what rename prevents; a power loss can still do it).
  std::filesystem::resize_file(store->path_of(key(1)), file_bytes(payload) - 4096);
  std::filesystem::resize_file(store->path_of(key(2)), 100);
  std::vector<char> back(payload, 'x');
  const status s = store->read(key(1), back);
  EXPECT_EQ(s.code(), errc::layout_mismatch) << s.to_string();
  EXPECT_FALSE(std::filesystem::exists(store->path_of(key(1))));
  EXPECT_EQ(store->check(key(2)).code(), errc::layout_mismatch);
  EXPECT_FALSE(std::filesystem::exists(store->path_of(key(2))));
  EXPECT_EQ(store->read(key(1), back).code(), errc::not_found);
}

TEST_P(FileStoreTest, ACorruptByteAnywhereIsRefused) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  // A byte of the KV, a byte of the header's fields, a byte of the padding's neighbour (the
  // KV's last byte).
  for (const uint64_t offset : {header_bytes + 5000, uint64_t{20}, header_bytes + payload - 1}) {
    ASSERT_TRUE(store->write(key(1), kv(1)).ok());
    flip_byte(store->path_of(key(1)), offset);
    std::vector<char> back(payload);
    const status s = store->read(key(1), back);
    EXPECT_EQ(s.code(), errc::layout_mismatch) << "offset " << offset << ": " << s.to_string();
    EXPECT_FALSE(std::filesystem::exists(store->path_of(key(1))));
  }
}

TEST_P(FileStoreTest, AFileOfAnotherBlockIsRefused) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->write(key(1), kv(1)).ok());
  copy_by_hand(store->path_of(key(1)), store->path_of(key(2)));
  std::vector<char> back(payload);
  EXPECT_EQ(store->read(key(2), back).code(), errc::layout_mismatch);
  EXPECT_TRUE(store->read(key(1), back).ok());
}

TEST_P(FileStoreTest, AnotherRunsFileIsRefused) {
  auto mine = open_ok(options(dir_.path(), "model=a"));
  auto theirs = open_ok(options(dir_.path(), "model=b"));
  ASSERT_TRUE(mine && theirs);
  EXPECT_NE(mine->rank_dir(), theirs->rank_dir());  // different runs, different directories
  ASSERT_TRUE(theirs->write(key(1), kv(1)).ok());
  // Their file put in my place by hand: its header names the other run.
  copy_by_hand(theirs->path_of(key(1)), mine->path_of(key(1)));
  std::vector<char> back(payload);
  const status s = mine->read(key(1), back);
  EXPECT_EQ(s.code(), errc::layout_mismatch);
  EXPECT_NE(s.message().find("another run"), std::string::npos) << s.message();
}

TEST_P(FileStoreTest, AConfigRecordOfAnotherRunIsRefused) {
  auto store = open_ok(options(dir_.path(), "model=a"));
  ASSERT_TRUE(store);
  const auto record = std::filesystem::path{store->rank_dir()}.parent_path() / "config.txt";
  store.reset();
  { std::ofstream{record} << "model=z\n"; }
  const auto again = file_store::open(options(dir_.path(), "model=a"));
  EXPECT_EQ(again.code(), errc::layout_mismatch);
}

TEST_P(FileStoreTest, ARestartFindsItsBlocksInWriteOrderAndDropsTempFiles) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  for (uint64_t i : {5, 3, 8}) ASSERT_TRUE(store->write(key(i), kv(i)).ok());
  // Distinct modification times without waiting for the clock: 5 oldest, then 3, then 8.
  int64_t t = 1'000'000;
  for (uint64_t i : {5, 3, 8}) {
    const struct timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, store->path_of(key(i)).c_str(), times, 0), 0);
    ++t;
  }
  const std::string temp = store->path_of(key(9)) + ".tmp.1.1";
  put_by_hand(temp, "half a block");
  const std::string stranger = std::filesystem::path{store->path_of(key(9))}.parent_path() /
                               "notes.txt";
  put_by_hand(stranger, "not ours");
  store.reset();

  auto again = open_ok(options(dir_.path()));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->found_at_open(), (std::vector<block_key>{key(5), key(3), key(8)}));
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_TRUE(std::filesystem::exists(stranger));  // not ours: left alone
  std::vector<char> back(payload);
  ASSERT_TRUE(again->read(key(3), back).ok());
  EXPECT_EQ(back, kv(3));
}

TEST_P(FileStoreTest, AnotherRankDoesNotSeeTheBlocks) {
  auto one = open_ok(options(dir_.path()));
  ASSERT_TRUE(one);
  ASSERT_TRUE(one->write(key(1), kv(1)).ok());
  auto o = options(dir_.path());
  o.rank = 2;
  auto two = open_ok(o);
  ASSERT_TRUE(two);
  EXPECT_TRUE(two->found_at_open().empty());
  std::vector<char> back(payload);
  EXPECT_EQ(two->read(key(1), back).code(), errc::not_found);
}

TEST_P(FileStoreTest, WrongSizedBuffersAreRefused) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  EXPECT_EQ(store->write(key(1), kv(1, payload - 1)).code(), errc::invalid_argument);
  std::vector<char> back(payload + 1);
  EXPECT_EQ(store->read(key(1), back).code(), errc::invalid_argument);
}

/// Files under the rank's directory whose names hold the temp marker.
std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

/// A removed block's file is kept under a temp name and overwritten by the next write: the
/// removed block is gone, the new one reads back byte for byte, and nothing is left behind.
TEST_P(FileStoreTest, ARemovedFileIsRecycledByTheNextWrite) {
  auto store = open_ok(options(dir_.path()));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->write(key(1), kv(1)).ok());
  ASSERT_TRUE(store->remove(key(1)).ok());
  std::vector<char> back(payload);
  EXPECT_EQ(store->read(key(1), back).code(), errc::not_found);
  const auto kept = temp_files(store->rank_dir());
  ASSERT_EQ(kept.size(), 1u);
  struct stat before {};
  ASSERT_EQ(::stat(kept.front().c_str(), &before), 0);

  // into a shard directory not made yet
  ASSERT_FALSE(
      std::filesystem::exists(std::filesystem::path{store->path_of(key(300))}.parent_path()));
  ASSERT_TRUE(store->write(key(300), kv(300)).ok());
  EXPECT_TRUE(temp_files(store->rank_dir()).empty());
  struct stat after {};
  ASSERT_EQ(::stat(store->path_of(key(300)).c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, overwritten
  EXPECT_EQ(after.st_mode & 07777, 0600u);
  ASSERT_TRUE(store->read(key(300), back).ok());
  EXPECT_EQ(back, kv(300));
  EXPECT_EQ(store->read(key(1), back).code(), errc::not_found);
}

TEST_P(FileStoreTest, RecycledFilesAreBoundedAndGoneWithTheStoreOrAtARestart) {
  auto o = options(dir_.path());
  o.recycled_files = 2;
  auto store = open_ok(o);
  ASSERT_TRUE(store);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(store->write(key(i), kv(i)).ok());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(store->remove(key(i)).ok());
  EXPECT_EQ(temp_files(store->rank_dir()).size(), 2u);  // the other two were unlinked
  EXPECT_TRUE(store->remove(key(77)).ok());             // a missing file is fine
  const std::string rank_dir = store->rank_dir();
  store.reset();
  EXPECT_TRUE(temp_files(rank_dir).empty());

  o.recycled_files = 0;
  store = open_ok(o);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->write(key(5), kv(5)).ok());
  ASSERT_TRUE(store->remove(key(5)).ok());
  EXPECT_TRUE(temp_files(rank_dir).empty());  // off: unlinked at once
}

/// The recycled files come out of a tier's capacity: blocks + recycled files never exceed it,
/// at most 32 recycled files, at most an eighth of the files the capacity holds.
TEST(FileStoreCapacityTest, RecycledFilesComeOutOfTheCapacity) {
  const uint64_t file = file_bytes(payload);
  EXPECT_EQ(split_capacity(1000 * file, file).recycled_files, 32u);
  EXPECT_EQ(split_capacity(1000 * file, file).ledger_bytes, 968 * file);
  EXPECT_EQ(split_capacity(64 * file + 5, file).recycled_files, 8u);
  EXPECT_EQ(split_capacity(64 * file + 5, file).ledger_bytes, 56 * file + 5);
  EXPECT_EQ(split_capacity(7 * file, file).recycled_files, 0u);  // too small to keep any
  EXPECT_EQ(split_capacity(7 * file, file).ledger_bytes, 7 * file);
  EXPECT_EQ(split_capacity(1000 * file, file, 0).recycled_files, 0u);
  for (uint64_t files = 0; files < 400; files += 7) {
    const auto split = split_capacity(files * file + 1, file);
    EXPECT_LE(split.ledger_bytes / file + split.recycled_files, files) << files;
    EXPECT_GE(split.ledger_bytes / file, files - files / 8) << files;
  }
}

INSTANTIATE_TEST_SUITE_P(Disks, FileStoreTest, ::testing::Values("/tmp", "/dev/shm"),
                         [](const auto& info) {
                           return std::string{info.param} == "/tmp" ? "tmp" : "dev_shm";
                         });

TEST(FileStoreDirectIoTest, AFileSystemRefusingODirectGetsBufferedIoAndSaysWhy) {
  scratch_mount fs{"ramfs", "mode=0700"};  // ramfs refuses O_DIRECT (tmpfs takes it since 6.6)
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  auto store = open_ok(options(fs.path()));
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->direct_io());
  EXPECT_NE(store->direct_io_note().find("O_DIRECT refused"), std::string::npos)
      << store->direct_io_note();
  ASSERT_TRUE(store->write(key(1), kv(1)).ok());
  std::vector<char> back(payload);
  ASSERT_TRUE(store->read(key(1), back).ok());
  EXPECT_EQ(back, kv(1));
}

TEST(FileStoreDirectIoTest, ADiskTakingODirectUsesIt) {
  scratch_dir dir{"/tmp"};
  auto store = open_ok(options(dir.path()));
  ASSERT_TRUE(store);
  if (!store->direct_io()) GTEST_SKIP() << store->direct_io_note();  // not every /tmp can
  EXPECT_TRUE(store->direct_io_note().empty());
}

TEST(FileStoreDirectIoTest, OffByConfigurationSaysSo) {
  scratch_dir dir{"/tmp"};
  auto o = options(dir.path());
  o.direct_io = false;
  auto store = open_ok(o);
  ASSERT_TRUE(store);
  EXPECT_FALSE(store->direct_io());
  EXPECT_EQ(store->direct_io_note(), "O_DIRECT off by configuration");
}

TEST(FileStoreOpenTest, RefusesAMissingRootAFileAndAZeroBlock) {
  scratch_dir dir{"/tmp"};
  EXPECT_EQ(file_store::open(options(dir.path() + "/absent")).code(), errc::io_error);
  const std::string file = dir.path() + "/plain";
  { std::ofstream{file} << "x"; }
  const auto s = file_store::open(options(file));
  EXPECT_EQ(s.code(), errc::io_error);
  EXPECT_NE(s.error().message().find("not a directory"), std::string::npos);
  auto o = options(dir.path());
  o.payload_bytes = 0;
  EXPECT_EQ(file_store::open(o).code(), errc::invalid_argument);
}

TEST(FileStoreOpenTest, RefusesAReadOnlyRoot) {
  scratch_mount fs{"tmpfs", "size=1m,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  if (!fs.make_read_only()) GTEST_SKIP() << fs.why_not();
  const auto s = file_store::open(options(fs.path()));
  EXPECT_EQ(s.code(), errc::io_error);
  EXPECT_NE(s.error().message().find("Read-only"), std::string::npos) << s.error().message();
}

TEST(FileStoreSpaceTest, ENOSPCFailsTheWriteLeavesNoTempFileAndKeepsEarlierBlocks) {
  scratch_mount fs{"tmpfs", "size=256k,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  auto store = open_ok(options(fs.path()));
  ASSERT_TRUE(store);
  // 256 KiB hold the directories and some 20 KiB files; writing 64 runs out of space.
  std::vector<uint64_t> written;
  status failure;
  for (uint64_t i = 0; i < 64 && failure.ok(); ++i) {
    failure = store->write(key(i), kv(i));
    if (failure.ok()) written.push_back(i);
  }
  ASSERT_FALSE(failure.ok()) << "256 KiB held 64 blocks";
  EXPECT_EQ(failure.code(), errc::io_error);
  EXPECT_NE(failure.message().find("No space left"), std::string::npos) << failure.message();
  ASSERT_FALSE(written.empty());
  for (const auto& e : std::filesystem::recursive_directory_iterator(fs.path())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
  std::vector<char> back(payload);
  for (uint64_t i : written) {
    ASSERT_TRUE(store->read(key(i), back).ok());
    EXPECT_EQ(back, kv(i));
  }
  // Space freed: writing works again.
  ASSERT_TRUE(store->remove(key(written.front())).ok());
  EXPECT_TRUE(store->write(key(100), kv(100)).ok());
}

}  // namespace
}  // namespace kvc::disk
