#include "disk/file_io.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <vector>

#include "tests/disk/scratch_dirs.hpp"

namespace kvc::disk {
namespace {

using testing::scratch_dir;

constexpr uint64_t payload = 8192;

block_key key(uint64_t i) { return block_key::from_index(i); }

std::unique_ptr<file_io> make_io(const std::string& root, uint32_t readers, uint32_t writers) {
  auto store = file_store::open(
      {.root_dir = root, .run_description = "io", .rank = 0, .payload_bytes = payload});
  EXPECT_TRUE(store.ok()) << store.error().to_string();
  if (!store) return nullptr;
  auto io = file_io::create(std::move(store).value(), readers, writers);
  EXPECT_TRUE(io.ok());
  return io ? std::move(io).value() : nullptr;
}

/// Waits for exactly n completions (explicit synchronisation: each wait returns what finished).
std::map<uint64_t, io_completion> collect(file_io& io, size_t n) {
  std::map<uint64_t, io_completion> out;
  while (out.size() < n) {
    for (auto& c : io.wait_completions()) out.emplace(c.ticket, std::move(c));
  }
  EXPECT_EQ(out.size(), n);
  return out;
}

TEST(FileIoTest, RefusesZeroThreads) {
  scratch_dir dir{"/tmp"};
  auto store = file_store::open(
      {.root_dir = dir.path(), .run_description = "io", .payload_bytes = payload});
  ASSERT_TRUE(store.ok());
  EXPECT_EQ(file_io::create(std::move(store).value(), 0, 1).code(), errc::invalid_argument);
}

TEST(FileIoTest, WritesThenReadsManyBlocksConcurrently) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), 4, 3);
  ASSERT_TRUE(io);
  constexpr uint64_t n = 32;
  std::vector<std::vector<char>> blocks(n, std::vector<char>(payload));
  for (uint64_t i = 0; i < n; ++i) {
    std::fill(blocks[i].begin(), blocks[i].end(), static_cast<char>(i + 1));
    io->submit_write(i, key(i), blocks[i]);
  }
  for (const auto& [ticket, c] : collect(*io, n)) {
    EXPECT_TRUE(c.outcome.ok()) << c.outcome.to_string();
    EXPECT_EQ(c.kind, io_kind::write);
    EXPECT_EQ(c.key, key(ticket));
    EXPECT_EQ(c.bytes, payload);
  }
  std::vector<std::vector<char>> back(n, std::vector<char>(payload));
  for (uint64_t i = 0; i < n; ++i) io->submit_read(100 + i, key(i), back[i]);
  io->submit_check(200, key(3));
  io->submit_check(201, key(999));
  const auto done = collect(*io, n + 2);
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(done.at(100 + i).outcome.ok());
    EXPECT_EQ(back[i], blocks[i]) << "block " << i;
  }
  EXPECT_TRUE(done.at(200).outcome.ok());
  EXPECT_EQ(done.at(201).outcome.code(), errc::not_found);
  EXPECT_TRUE(io->take_completions().empty());
}

TEST(FileIoTest, ARemovalThenAReadIsAMiss) {
  scratch_dir dir{"/dev/shm"};
  auto io = make_io(dir.path(), 1, 1);
  ASSERT_TRUE(io);
  std::vector<char> block(payload, 'k');
  io->submit_write(1, key(1), block);
  collect(*io, 1);
  io->submit_remove(2, key(1));
  EXPECT_TRUE(collect(*io, 1).at(2).outcome.ok());
  std::vector<char> back(payload);
  io->submit_read(3, key(1), back);
  const auto c = collect(*io, 1).at(3);
  EXPECT_EQ(c.outcome.code(), errc::not_found);
  EXPECT_EQ(c.bytes, 0u);
}

TEST(FileIoTest, DestructionFinishesQueuedWrites) {
  scratch_dir dir{"/tmp"};
  std::string path;
  std::vector<std::vector<char>> blocks(8, std::vector<char>(payload, 'w'));
  {
    auto io = make_io(dir.path(), 1, 1);
    ASSERT_TRUE(io);
    for (uint64_t i = 0; i < 8; ++i) io->submit_write(i, key(i), blocks[i]);
    path = io->store().path_of(key(7));
  }
  EXPECT_TRUE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace kvc::disk
