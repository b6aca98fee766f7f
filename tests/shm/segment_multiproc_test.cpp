// Two real processes share one segment: fork()ed children create or attach, exit with a code
// that says which check failed, and the parent waitpid()s. Pipes order the steps (no sleeps).
#include "shm/segment.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <optional>

#include "tests/shm/shm_fixture.hpp"

namespace kvc::shm {
namespace {

using ::testing::HasSubstr;
using testing::ShmTest;

constexpr uintptr_t two_mib = uintptr_t{2} << 20;

/// One-way, one-shot signal between two processes. After fork() each side keeps only its end
/// (writer() / reader()), so a reader whose writer died without notifying sees EOF instead of
/// blocking forever.
class pipe_signal {
 public:
  pipe_signal() { EXPECT_EQ(::pipe(fds_), 0); }
  ~pipe_signal() {
    close_end(0);
    close_end(1);
  }
  pipe_signal& writer() {
    close_end(0);
    return *this;
  }
  pipe_signal& reader() {
    close_end(1);
    return *this;
  }
  void notify() { (void)!::write(fds_[1], "x", 1); }
  /// Blocks until notify() was called; false if the writer end closed first.
  bool wait() {
    char c;
    return ::read(fds_[0], &c, 1) == 1;
  }

 private:
  void close_end(int i) {
    if (fds_[i] >= 0) ::close(fds_[i]);
    fds_[i] = -1;
  }
  int fds_[2] = {-1, -1};
};

/// Runs `body` in a forked child that exits with its return value; never returns in the child.
pid_t run_child(const std::function<int()>& body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (...) {
      code = 98;
    }
    ::_exit(code);
  }
  EXPECT_GT(pid, 0);
  return pid;
}

/// Exit code of a reaped child, or 128 + signal.
int reap(pid_t pid) {
  int st = 0;
  if (::waitpid(pid, &st, 0) != pid) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -2;
}

uint8_t pattern(uint64_t i, uint8_t seed) { return static_cast<uint8_t>(i * 131 + seed); }

void fill(std::span<std::byte> region, uint8_t seed) {
  for (uint64_t i = 0; i < region.size(); ++i) region[i] = std::byte{pattern(i, seed)};
}

bool holds(std::span<const std::byte> region, uint8_t seed) {
  for (uint64_t i = 0; i < region.size(); ++i) {
    if (region[i] != std::byte{pattern(i, seed)}) return false;
  }
  return true;
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % two_mib == 0; }

class SegmentMultiprocTest : public ShmTest {
 protected:
  const pool_geometry geo_{2, 4, 65536 + 100};
};

TEST_F(SegmentMultiprocTest, ChildAttachesAndWritesOnlyItsOwnRankRegion) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_, {.prefault = true});
  ASSERT_TRUE(owner.ok()) << owner.error().to_string();
  ASSERT_TRUE(aligned(owner->pool_base()));
  fill(owner->rank_region(0), 1);
  const uint64_t checksum = owner->layout_checksum();
  const pid_t parent = ::getpid();

  const pid_t child = run_child([&] {
    auto seg = segment::attach(name, &geo_);
    if (!seg) return 10;
    if (!aligned(seg->pool_base())) return 11;
    if (seg->layout_checksum() != checksum || seg->creator_pid() != parent) return 12;
    if (seg->slot(1, 3) != seg->pool_base() + (1 * 4 + 3) * seg->geometry().slot_stride()) {
      return 13;
    }
    if (!seg->prefault_rank(1).ok()) return 14;
    if (!holds(seg->rank_region(0), 1)) return 15;  // the parent's bytes are visible
    fill(seg->rank_region(1), 2);
    return 0;
  });
  ASSERT_EQ(reap(child), 0);
  EXPECT_TRUE(holds(owner->rank_region(0), 1));
  EXPECT_TRUE(holds(owner->rank_region(1), 2));
  EXPECT_TRUE(segment::exists(name).value());  // an attacher never removes
}

TEST_F(SegmentMultiprocTest, ParentAttachesASegmentCreatedByAChild) {
  const auto name = unique_name();
  pipe_signal created, done;
  const pid_t child = run_child([&] {
    created.writer();
    done.reader();
    auto seg = segment::create(name, geo_);
    if (!seg) return 10;
    if (!aligned(seg->pool_base())) return 11;
    fill(seg->rank_region(1), 7);
    created.notify();
    if (!done.wait()) return 12;
    return 0;  // remove_on_close: the segment object removes the name here
  });
  created.reader();
  done.writer();
  ASSERT_TRUE(created.wait()) << "child exited with " << reap(child);
  auto seg = segment::attach(name, &geo_);
  ASSERT_TRUE(seg.ok()) << seg.error().to_string();
  EXPECT_TRUE(aligned(seg->pool_base()));
  EXPECT_EQ(seg->creator_pid(), child);
  EXPECT_FALSE(seg->is_creator());
  EXPECT_TRUE(holds(seg->rank_region(1), 7));
  done.notify();
  ASSERT_EQ(reap(child), 0);
  EXPECT_FALSE(segment::exists(name).value());
  EXPECT_TRUE(holds(seg->rank_region(1), 7));  // a mapping outlives the name
}

TEST_F(SegmentMultiprocTest, SegmentAndDataSurviveAKilledWorker) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  const pid_t child = run_child([&] {
    auto seg = segment::attach(name, &geo_);
    if (!seg) return 10;
    fill(seg->rank_region(1), 3);
    ::raise(SIGKILL);
    return 11;
  });
  ASSERT_EQ(reap(child), 128 + SIGKILL);
  EXPECT_TRUE(segment::exists(name).value());
  EXPECT_TRUE(holds(owner->rank_region(1), 3));
  auto again = segment::attach(name, &geo_);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(holds(again->rank_region(1), 3));
}

TEST_F(SegmentMultiprocTest, StaleSegmentOfAKilledCreatorIsReplaced) {
  const auto name = unique_name();
  const pid_t child = run_child([&] {
    auto seg = segment::create(name, geo_);
    if (!seg) return 10;
    fill(seg->rank_region(0), 5);
    ::raise(SIGKILL);  // dies without removing the name
    return 11;
  });
  ASSERT_EQ(reap(child), 128 + SIGKILL);
  ASSERT_TRUE(segment::exists(name).value());

  auto leftover = segment::attach(name, &geo_);  // data outlive their creator
  ASSERT_TRUE(leftover.ok());
  EXPECT_EQ(leftover->creator_pid(), child);
  EXPECT_TRUE(holds(leftover->rank_region(0), 5));

  const pool_geometry next{1, 3, 8192};
  auto fresh = segment::create(name, next);
  ASSERT_TRUE(fresh.ok()) << fresh.error().to_string();
  EXPECT_EQ(fresh->creator_pid(), ::getpid());
  auto peer = segment::attach(name, &next);
  ASSERT_TRUE(peer.ok());
  EXPECT_TRUE(holds(leftover->rank_region(0), 5));  // the old mapping is untouched
  EXPECT_EQ(segment::attach(name, &geo_).code(), errc::layout_mismatch);
}

TEST_F(SegmentMultiprocTest, AnUnreapedZombieCreatorCountsAsDead) {
  const auto name = unique_name();
  const pid_t child = run_child([&] {
    auto seg = segment::create(name, geo_);
    if (!seg) return 10;
    ::_exit(0);  // no destructor: the name stays
  });
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);
  ASSERT_EQ(info.si_status, 0);
  // kill(pid, 0) still succeeds for a zombie; create must see through it.
  ASSERT_EQ(::kill(child, 0), 0);
  auto fresh = segment::create(name, geo_);
  EXPECT_TRUE(fresh.ok()) << fresh.error().to_string();
  EXPECT_EQ(reap(child), 0);
}

TEST_F(SegmentMultiprocTest, ALiveCreatorInAnotherProcessIsNeverReplaced) {
  const auto name = unique_name();
  pipe_signal created, done;
  const pid_t child = run_child([&] {
    created.writer();
    done.reader();
    auto seg = segment::create(name, geo_);
    if (!seg) return 10;
    fill(seg->rank_region(0), 9);
    created.notify();
    if (!done.wait()) return 12;
    return holds(seg->rank_region(0), 9) ? 0 : 13;
  });
  created.reader();
  done.writer();
  ASSERT_TRUE(created.wait()) << "child exited with " << reap(child);
  auto mine = segment::create(name, geo_);
  ASSERT_FALSE(mine.ok());
  EXPECT_EQ(mine.code(), errc::shm_error);
  EXPECT_THAT(mine.error().message(), HasSubstr(std::to_string(child)));
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->creator_pid(), child);
  done.notify();
  EXPECT_EQ(reap(child), 0);
  EXPECT_FALSE(segment::exists(name).value());
}

TEST_F(SegmentMultiprocTest, ChildRefusesToReplaceTheParentsLiveSegment) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  fill(owner->rank_region(0), 4);
  const pid_t child = run_child([&] {
    auto seg = segment::create(name, pool_geometry{1, 1, 4096});
    if (seg.ok()) return 10;
    if (seg.code() != errc::shm_error) return 11;
    return 0;
  });
  ASSERT_EQ(reap(child), 0);
  EXPECT_TRUE(holds(owner->rank_region(0), 4));
  EXPECT_TRUE(segment::attach(name, &geo_).ok());
}

}  // namespace
}  // namespace kvc::shm
