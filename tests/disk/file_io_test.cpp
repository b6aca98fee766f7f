#include "disk/file_io.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include "disk/uring_ring.hpp"
#include "tests/disk/scratch_dirs.hpp"

namespace kvc::disk {
namespace {

using testing::scratch_dir;

constexpr uint64_t payload = 8192;

block_key key(uint64_t i) {
  return block_key::from_index(i);
}

std::unique_ptr<file_io> make_io(const std::string& root, file_io_options options,
                                 uint64_t bytes = payload) {
  auto store = file_store::open(
      {.root_dir = root, .run_description = "io", .rank = 0, .payload_bytes = bytes});
  EXPECT_TRUE(store.ok()) << store.error().to_string();
  if (!store) return nullptr;
  auto io = file_io::create(std::move(store).value(), options);
  EXPECT_TRUE(io.ok()) << io.error().to_string();
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

/// Page-aligned memory of `bytes` (the pool's slots are): the engines read into and write from
/// it directly.
struct aligned_block {
  explicit aligned_block(size_t bytes)
      : mem(static_cast<char*>(
            std::aligned_alloc(page_bytes, (bytes + page_bytes - 1) / page_bytes * page_bytes))),
        size(bytes) {}
  std::span<char> span() { return {mem.get(), size}; }
  struct freer {
    void operator()(char* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<char, freer> mem;
  size_t size;
};

void fill(std::span<char> b, uint64_t i) {
  for (size_t j = 0; j < b.size(); ++j) b[j] = static_cast<char>(block_key::mix(i * 131 + j));
}

TEST(FileIoTest, RefusesZeroThreadsAndZeroDepth) {
  scratch_dir dir{"/tmp"};
  for (file_io_options o :
       {file_io_options{.n_read_threads = 0, .n_write_threads = 1},
        file_io_options{.n_read_threads = 1, .n_write_threads = 0},
        file_io_options{.n_read_threads = 1, .n_write_threads = 1, .io_depth = 0}}) {
    auto store = file_store::open(
        {.root_dir = dir.path(), .run_description = "io", .payload_bytes = payload});
    ASSERT_TRUE(store.ok());
    EXPECT_EQ(file_io::create(std::move(store).value(), o).code(), errc::invalid_argument);
  }
}

TEST(FileIoTest, EngineNamesRoundTrip) {
  for (io_engine e : {io_engine::automatic, io_engine::io_uring, io_engine::threads}) {
    EXPECT_EQ(io_engine_named(name_of(e)), e);
  }
  EXPECT_EQ(name_of(io_engine::automatic), "auto");
  EXPECT_FALSE(io_engine_named("uring").has_value());
}

TEST(BlockTransferTest, AdvanceConsumesPiecesInOrder) {
  char a[8];
  char b[8];
  block_transfer t;
  t.op = transfer_op::read;
  t.pieces[0] = {a, 8};
  t.pieces[1] = {b, 8};
  t.count = 2;
  t.expected = 16;
  t.advance(5);
  EXPECT_EQ(t.done, 5u);
  ASSERT_EQ(t.count, 2);
  EXPECT_EQ(t.pieces[0].iov_base, a + 5);
  EXPECT_EQ(t.pieces[0].iov_len, 3u);
  t.advance(3);
  ASSERT_EQ(t.count, 1);
  EXPECT_EQ(t.pieces[0].iov_base, b);
  EXPECT_TRUE(t.pending());
  t.advance(0);  // a read that meets the end of the file
  EXPECT_TRUE(t.at_end);
  EXPECT_FALSE(t.pending());
  EXPECT_TRUE(t.outcome.ok());
}

TEST(BlockTransferTest, AWriteThatMovesNothingFails) {
  block_transfer t;
  t.op = transfer_op::write;
  t.temp = "/x.tmp";
  t.expected = 4096;
  t.advance(0);
  EXPECT_EQ(t.outcome.code(), errc::io_error);
  EXPECT_FALSE(t.pending());
}

/// file_io's contract, once per engine. The io_uring instance skips where the kernel refuses
/// io_uring (the reason is printed).
class FileIoEngineTest : public ::testing::TestWithParam<io_engine> {
 protected:
  void SetUp() override {
    if (GetParam() == io_engine::io_uring) {
      const std::string why = io_uring_unavailable_reason();
      if (!why.empty()) GTEST_SKIP() << "io_uring unavailable here: " << why;
    }
  }
  file_io_options options(uint32_t readers, uint32_t writers, uint32_t depth = 4) const {
    return {.n_read_threads = readers,
            .n_write_threads = writers,
            .engine = GetParam(),
            .io_depth = depth};
  }
};

TEST_P(FileIoEngineTest, RunsTheEngineAskedFor) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(1, 1));
  ASSERT_TRUE(io);
  EXPECT_EQ(io->engine(), GetParam());
  EXPECT_EQ(io->engine_note().empty(), GetParam() == io_engine::io_uring) << io->engine_note();
}

TEST_P(FileIoEngineTest, WritesThenReadsManyBlocksConcurrently) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(4, 3));
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
    EXPECT_EQ(done.at(100 + i).bytes, payload);
    EXPECT_EQ(back[i], blocks[i]) << "block " << i;
  }
  EXPECT_TRUE(done.at(200).outcome.ok());
  EXPECT_EQ(done.at(201).outcome.code(), errc::not_found);
  EXPECT_TRUE(io->take_completions().empty());
}

/// Page-aligned memory is moved without staging; a KV that is not a page multiple has its last
/// partial page staged. Both, and unaligned memory, round-trip byte for byte, more blocks than
/// the rings' depth.
TEST_P(FileIoEngineTest, RoundTripsAlignedAndUnalignedMemoryOfAnySize) {
  for (const uint64_t bytes : {uint64_t{8192}, uint64_t{10'000}, uint64_t{100}}) {
    SCOPED_TRACE(bytes);
    scratch_dir dir{"/tmp"};
    auto io = make_io(dir.path(), options(2, 2, 3), bytes);
    ASSERT_TRUE(io);
    constexpr uint64_t n = 12;
    std::vector<aligned_block> aligned;
    std::vector<std::vector<char>> plain(n, std::vector<char>(bytes + 1));
    for (uint64_t i = 0; i < n; ++i) {
      aligned.emplace_back(bytes);
      fill(aligned[i].span(), i);
      // one byte past the start: never page-aligned
      const auto unaligned = std::span<char>{plain[i]}.subspan(1, bytes);
      fill(unaligned, i + n);
      io->submit_write(i, key(i), aligned[i].span());
      io->submit_write(n + i, key(n + i), unaligned);
    }
    for (const auto& [ticket, c] : collect(*io, 2 * n)) {
      EXPECT_TRUE(c.outcome.ok()) << c.outcome.to_string();
    }
    std::vector<aligned_block> back_aligned;
    std::vector<std::vector<char>> back_plain(n, std::vector<char>(bytes + 1));
    for (uint64_t i = 0; i < n; ++i) {
      back_aligned.emplace_back(bytes);
      // read each block into the other kind of memory than it was written from
      io->submit_read(100 + i, key(n + i), back_aligned[i].span());
      io->submit_read(200 + i, key(i), std::span<char>{back_plain[i]}.subspan(1, bytes));
    }
    const auto done = collect(*io, 2 * n);
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(done.at(100 + i).outcome.ok()) << done.at(100 + i).outcome.to_string();
      ASSERT_TRUE(done.at(200 + i).outcome.ok()) << done.at(200 + i).outcome.to_string();
      EXPECT_TRUE(std::equal(back_aligned[i].span().begin(), back_aligned[i].span().end(),
                             plain[i].begin() + 1))
          << "block " << n + i;
      EXPECT_TRUE(
          std::equal(back_plain[i].begin() + 1, back_plain[i].end(), aligned[i].span().begin()))
          << "block " << i;
    }
  }
}

/// A flipped byte of the KV and a file cut short are refused (never returned as KV) and removed,
/// whichever engine read them.
TEST_P(FileIoEngineTest, RefusesCorruptAndTornFilesAndRemovesThem) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(2, 1));
  ASSERT_TRUE(io);
  aligned_block a{payload};
  aligned_block b{payload};
  fill(a.span(), 1);
  fill(b.span(), 2);
  io->submit_write(1, key(1), a.span());
  io->submit_write(2, key(2), b.span());
  collect(*io, 2);
  const std::string corrupt = io->store().path_of(key(1));
  const std::string torn = io->store().path_of(key(2));
  {
    std::fstream f{corrupt, std::ios::in | std::ios::out | std::ios::binary};
    f.seekp(static_cast<std::streamoff>(header_bytes + 77));
    f.put('\x5a' ^ a.span()[77]);
  }
  std::filesystem::resize_file(torn, header_bytes + page_bytes);
  aligned_block back{payload};
  io->submit_read(3, key(1), back.span());
  auto c = collect(*io, 1).at(3);
  EXPECT_EQ(c.outcome.code(), errc::layout_mismatch) << c.outcome.to_string();
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_FALSE(std::filesystem::exists(corrupt));
  io->submit_read(4, key(2), back.span());
  c = collect(*io, 1).at(4);
  EXPECT_EQ(c.outcome.code(), errc::layout_mismatch) << c.outcome.to_string();
  EXPECT_FALSE(std::filesystem::exists(torn));
}

TEST_P(FileIoEngineTest, ARemovalThenAReadIsAMiss) {
  scratch_dir dir{"/dev/shm"};
  auto io = make_io(dir.path(), options(1, 1));
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

/// Whatever a thread has taken runs on; the rest is withdrawn: each ticket either comes back
/// from cancel() (never completes, its file never written) or completes, never both.
TEST_P(FileIoEngineTest, ACancelledRequestNeverCompletesAndTheOthersDo) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(1, 1, 1));
  ASSERT_TRUE(io);
  constexpr uint64_t n = 16;
  std::vector<std::vector<char>> blocks(n, std::vector<char>(payload, 'c'));
  std::vector<uint64_t> tickets;
  for (uint64_t i = 0; i < n; ++i) {
    io->submit_write(i, key(i), blocks[i]);
    tickets.push_back(i);
  }
  const std::vector<uint64_t> cancelled = io->cancel(tickets);
  const auto done = collect(*io, n - cancelled.size());
  EXPECT_EQ(done.size() + cancelled.size(), n);
  for (uint64_t t : cancelled) {
    EXPECT_FALSE(done.contains(t)) << t;
    EXPECT_EQ(io->store().check(key(t)).code(), errc::not_found) << t;
  }
  for (const auto& [t, c] : done) EXPECT_TRUE(c.outcome.ok()) << c.outcome.to_string();
  EXPECT_TRUE(io->take_completions().empty());
  EXPECT_TRUE(io->cancel(tickets).empty());  // done or withdrawn: nothing left to cancel
}

TEST_P(FileIoEngineTest, DestructionFinishesQueuedWrites) {
  scratch_dir dir{"/tmp"};
  std::string path;
  std::vector<std::vector<char>> blocks(8, std::vector<char>(payload, 'w'));
  {
    auto io = make_io(dir.path(), options(1, 1, 2));
    ASSERT_TRUE(io);
    for (uint64_t i = 0; i < 8; ++i) io->submit_write(i, key(i), blocks[i]);
    path = io->store().path_of(key(7));
  }
  EXPECT_TRUE(std::filesystem::exists(path));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

/// Temp files (writes in progress, recycled files) under `dir`.
size_t temp_files_under(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    n += e.path().filename().string().find(".tmp.") != std::string::npos ? 1 : 0;
  }
  return n;
}

/// A removed block's file is recycled by the next write, whose rename goes into a shard
/// directory not made yet (io_uring: the renameat in the ring fails with ENOENT, the directory
/// is made and the rename sent again): the same file, read back byte for byte, nothing left.
TEST_P(FileIoEngineTest, ARecycledFileIsRenamedIntoAShardNotMadeYet) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(1, 1));
  ASSERT_TRUE(io);
  aligned_block a{payload};
  fill(a.span(), 1);
  io->submit_write(1, key(1), a.span());
  ASSERT_TRUE(collect(*io, 1).at(1).outcome.ok());
  io->submit_remove(2, key(1));
  ASSERT_TRUE(collect(*io, 1).at(2).outcome.ok());
  ASSERT_EQ(temp_files_under(dir.path()), 1u);
  const std::filesystem::path target = io->store().path_of(key(300));
  ASSERT_FALSE(std::filesystem::exists(target.parent_path()));
  aligned_block b{payload};
  fill(b.span(), 300);
  io->submit_write(3, key(300), b.span());
  const auto w = collect(*io, 1).at(3);
  ASSERT_TRUE(w.outcome.ok()) << w.outcome.to_string();
  EXPECT_EQ(w.bytes, payload);
  EXPECT_EQ(temp_files_under(dir.path()), 0u);
  aligned_block back{payload};
  io->submit_read(4, key(300), back.span());
  ASSERT_TRUE(collect(*io, 1).at(4).outcome.ok());
  EXPECT_TRUE(std::equal(back.span().begin(), back.span().end(), b.span().begin()));
}

/// A write whose temp file cannot be made (its shard directory is a file: ENOTDIR) fails with
/// the reason naming the file, and the next write into a good shard still works.
TEST_P(FileIoEngineTest, AWriteWhoseFileCannotBeMadeFailsWithTheReason) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(1, 1));
  ASSERT_TRUE(io);
  const std::filesystem::path shard =
      std::filesystem::path{io->store().path_of(key(1))}.parent_path();
  std::ofstream{shard} << "in the way";
  aligned_block a{payload};
  fill(a.span(), 1);
  io->submit_write(1, key(1), a.span());
  const auto c = collect(*io, 1).at(1);
  EXPECT_EQ(c.outcome.code(), errc::io_error);
  EXPECT_NE(c.outcome.message().find("cannot create"), std::string::npos) << c.outcome.message();
  EXPECT_NE(c.outcome.message().find("Not a directory"), std::string::npos)
      << c.outcome.message();
  EXPECT_EQ(c.bytes, 0u);
  ASSERT_NE(std::filesystem::path{io->store().path_of(key(2))}.parent_path(), shard);
  io->submit_write(2, key(2), a.span());
  EXPECT_TRUE(collect(*io, 1).at(2).outcome.ok());
}

/// A write whose rename into place fails (a directory holds the block's name) fails with the
/// reason, its temp file removed; a read of the block is then no block file.
TEST_P(FileIoEngineTest, AWriteWhoseRenameFailsRemovesItsTempFile) {
  scratch_dir dir{"/tmp"};
  auto io = make_io(dir.path(), options(1, 1));
  ASSERT_TRUE(io);
  const std::string path = io->store().path_of(key(1));
  std::filesystem::create_directories(std::filesystem::path{path} / "occupied");
  aligned_block a{payload};
  fill(a.span(), 1);
  io->submit_write(1, key(1), a.span());
  const auto c = collect(*io, 1).at(1);
  EXPECT_EQ(c.outcome.code(), errc::io_error);
  EXPECT_NE(c.outcome.message().find("cannot rename into " + path), std::string::npos)
      << c.outcome.message();
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(temp_files_under(dir.path()), 0u);
  EXPECT_TRUE(std::filesystem::is_directory(path));
}

/// ENOSPC mid-run (a 256 KiB tmpfs): the write that meets it fails with the reason and leaves
/// no temp file, the blocks written before read back byte for byte, and once space is freed
/// writes work again. Root only (the mount); skips otherwise.
TEST_P(FileIoEngineTest, ENOSPCFailsTheWriteLeavesNoTempFileAndKeepsEarlierBlocks) {
  testing::scratch_mount fs{"tmpfs", "size=256k,mode=0700"};
  if (!fs.mounted()) GTEST_SKIP() << fs.why_not();
  auto store = file_store::open({.root_dir = fs.path(),
                                 .run_description = "io",
                                 .payload_bytes = payload,
                                 .recycled_files = 0});
  ASSERT_TRUE(store.ok()) << store.error().to_string();
  auto made = file_io::create(std::move(store).value(), options(1, 1));
  ASSERT_TRUE(made.ok());
  auto& io = **made;
  std::vector<aligned_block> blocks;
  std::vector<uint64_t> written;
  status failure;
  for (uint64_t i = 0; i < 64 && failure.ok(); ++i) {
    blocks.emplace_back(payload);
    fill(blocks.back().span(), i);
    io.submit_write(i, key(i), blocks.back().span());
    failure = collect(io, 1).at(i).outcome;
    if (failure.ok()) written.push_back(i);
  }
  ASSERT_FALSE(failure.ok()) << "256 KiB held 64 blocks";
  EXPECT_EQ(failure.code(), errc::io_error);
  EXPECT_NE(failure.message().find("No space left"), std::string::npos) << failure.message();
  ASSERT_FALSE(written.empty());
  EXPECT_EQ(temp_files_under(fs.path()), 0u);
  aligned_block back{payload};
  for (uint64_t i : written) {
    io.submit_read(100 + i, key(i), back.span());
    ASSERT_TRUE(collect(io, 1).at(100 + i).outcome.ok());
    EXPECT_TRUE(std::equal(back.span().begin(), back.span().end(), blocks[i].span().begin()));
  }
  io.submit_remove(200, key(written.front()));
  ASSERT_TRUE(collect(io, 1).at(200).outcome.ok());
  io.submit_write(201, key(100), blocks.front().span());
  EXPECT_TRUE(collect(io, 1).at(201).outcome.ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, FileIoEngineTest,
                         ::testing::Values(io_engine::io_uring, io_engine::threads),
                         [](const auto& info) { return std::string{name_of(info.param)}; });

/// Makes io_uring_setup fail with EPERM in this process, as a container's seccomp profile does.
bool refuse_io_uring_like_a_container() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

/// The fallback's checks in a process whose io_uring is refused: 0 when all hold, else the
/// number of the first that failed.
int fallback_checks(const std::string& root) {
  if (!refuse_io_uring_like_a_container()) return 3;
  if (io_uring_unavailable_reason().empty()) return 4;
  auto explicit_uring =
      file_store::open({.root_dir = root, .run_description = "io", .payload_bytes = payload});
  if (!explicit_uring) return 5;
  auto refused = file_io::create(
      std::move(explicit_uring).value(),
      {.n_read_threads = 1, .n_write_threads = 1, .engine = io_engine::io_uring});
  if (refused || refused.code() != errc::device_unavailable) return 6;
  std::cerr << "explicit: " << refused.error().message() << "\n";
  auto io = make_io(root, {.n_read_threads = 2, .n_write_threads = 2});
  if (!io || io->engine() != io_engine::threads) return 7;
  std::cerr << "auto: " << io->engine_note() << "\n";
  std::vector<char> block(payload, 'f');
  std::vector<char> back(payload);
  io->submit_write(1, key(1), block);
  if (!collect(*io, 1).at(1).outcome.ok()) return 8;
  io->submit_read(2, key(1), back);
  if (!collect(*io, 1).at(2).outcome.ok() || back != block) return 9;
  return 0;
}

/// Where io_uring is refused (a seccomp filter, in a child process), `auto` falls back to the
/// thread pool, says why, and still moves blocks; `io_uring` asked for explicitly is an error.
/// The child (the "threadsafe" style runs this test again in it) removes its own scratch
/// directory before it exits.
TEST(FileIoFallbackDeathTest, AutoFallsBackToThreadsWhereIoUringIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  scratch_dir dir{"/tmp"};
  ASSERT_FALSE(dir.path().empty());
  EXPECT_EXIT(
      {
        const int code = fallback_checks(dir.path());
        std::error_code ec;
        std::filesystem::remove_all(dir.path(), ec);
        std::_Exit(code);
      },
      ::testing::ExitedWithCode(0),
      "explicit: file tier: io_uring_queue_init: Operation not permitted \\(refused by a "
      "seccomp filter.*\n"
      "auto: io_uring unavailable, threads instead: file tier: io_uring_queue_init: Operation "
      "not permitted");
}

}  // namespace
}  // namespace kvc::disk
