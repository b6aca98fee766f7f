#include "shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <numaif.h>

#include <gtest/gtest.h>

#include <array>

#include <cstring>
#include <functional>
#include <optional>

#include "shm/process_identity.hpp"
#include "shm/segment_header.hpp"
#include "shm/stale_segments.hpp"
#include "tests/shm/shm_fixture.hpp"

namespace kvc::shm {
namespace {

using ::testing::HasSubstr;
using testing::ShmTest;

constexpr uint64_t two_mib = uint64_t{2} << 20;

bool aligned_2mib(const void* p) { return reinterpret_cast<uintptr_t>(p) % two_mib == 0; }

struct stat stat_of(const std::string& name) {
  struct stat st {};
  EXPECT_EQ(::stat(("/dev/shm" + name).c_str(), &st), 0) << name;
  return st;
}

/// Edits the header of segment `name` through a separate raw mapping, as another (buggy or
/// foreign) process would.
void edit_header(const std::string& name, const std::function<void(segment_header&)>& edit) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  void* p = ::mmap(nullptr, sizeof(segment_header), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(p, MAP_FAILED);
  edit(*static_cast<segment_header*>(p));
  ::munmap(p, sizeof(segment_header));
}

/// Rewrites the checksum so that only the edited field is inconsistent.
void reseal(segment_header& h) {
  h.layout_checksum = layout_checksum(h.layout_version, h.world_size, h.num_slots, h.slot_bytes,
                                      h.slot_stride, h.pool_offset, h.total_bytes);
}

class SegmentTest : public ShmTest {
 protected:
  const pool_geometry geo_{3, 5, 10000};  // stride 12288: not a power of two on purpose
};

TEST_F(SegmentTest, CreateSizesTheSegmentExactlyAndWritesAValidHeader) {
  const auto name = unique_name();
  auto seg = segment::create(name, geo_);
  ASSERT_TRUE(seg.ok()) << seg.error().to_string();
  EXPECT_EQ(seg->name(), name);
  EXPECT_EQ(seg->geometry(), geo_);
  EXPECT_TRUE(seg->is_creator());
  EXPECT_EQ(seg->creator_pid(), ::getpid());
  EXPECT_EQ(seg->total_bytes(), two_mib + 3u * 5 * 12288);
  EXPECT_EQ(seg->layout_checksum(), layout_checksum(geo_));
  const auto st = stat_of(name);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), seg->total_bytes());
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::getuid());

  const auto* h = reinterpret_cast<const segment_header*>(seg->pool_base() - pool_offset);
  EXPECT_EQ(h->magic.load(), segment_magic);
  EXPECT_EQ(h->layout_version.load(), segment_layout_version);
  EXPECT_EQ(h->ready.load(), 1u);
  EXPECT_EQ(h->creator_pid.load(), ::getpid());
  EXPECT_EQ(h->creator_start_time.load(), process_start_time(::getpid()).value());
  EXPECT_EQ(h->world_size.load(), 3u);
  EXPECT_EQ(h->num_slots.load(), 5u);
  EXPECT_EQ(h->slot_bytes.load(), 10000u);
  EXPECT_EQ(h->slot_stride.load(), 12288u);
  EXPECT_EQ(h->pool_offset.load(), pool_offset);
  EXPECT_EQ(h->total_bytes.load(), seg->total_bytes());
}

TEST_F(SegmentTest, RemoveOnCloseRemovesTheNameAndKeepingItLeavesIt) {
  const auto name = unique_name();
  { ASSERT_TRUE(segment::create(name, geo_).ok()); }
  EXPECT_FALSE(segment::exists(name).value());
  {
    auto seg = segment::create(name, geo_, {.prefault = false, .remove_on_close = false});
    ASSERT_TRUE(seg.ok());
  }
  EXPECT_TRUE(segment::exists(name).value());
  EXPECT_TRUE(segment::remove(name).ok());
  EXPECT_FALSE(segment::exists(name).value());
  EXPECT_EQ(segment::remove(name).code(), errc::not_found);
}

TEST_F(SegmentTest, LayoutIsRankMajorWithPageAlignedStride) {
  auto seg = segment::create(unique_name(), geo_);
  ASSERT_TRUE(seg.ok());
  std::byte* base = seg->pool_base();
  EXPECT_TRUE(aligned_2mib(base));
  EXPECT_TRUE(aligned_2mib(base - pool_offset));  // the whole mapping is 2 MiB-aligned
  for (rank_id r = 0; r < 3; ++r) {
    for (cpu_slot s = 0; s < 5; ++s) {
      EXPECT_EQ(seg->slot(r, s), base + (r * 5 + s) * 12288);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(seg->slot(r, s)) % 4096, 0u);
    }
    const auto region = seg->rank_region(r);
    EXPECT_EQ(region.data(), seg->slot(r, 0));
    EXPECT_EQ(region.size(), 5u * 12288);
  }
  EXPECT_EQ(seg->rank_region(2).data() + seg->rank_region(2).size(),
            base + seg->total_bytes() - pool_offset);
  EXPECT_EQ(seg->slot(3, 0), nullptr);
  EXPECT_EQ(seg->slot(0, 5), nullptr);
  EXPECT_TRUE(seg->rank_region(3).empty());
}

TEST_F(SegmentTest, AttachSeesTheCreatorsBytesAtItsOwnAlignedAddress) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok()) << peer.error().to_string();
  EXPECT_FALSE(peer->is_creator());
  EXPECT_EQ(peer->creator_pid(), ::getpid());
  EXPECT_EQ(peer->geometry(), geo_);
  EXPECT_EQ(peer->layout_checksum(), owner->layout_checksum());
  EXPECT_EQ(peer->total_bytes(), owner->total_bytes());
  EXPECT_NE(peer->pool_base(), owner->pool_base());
  EXPECT_TRUE(aligned_2mib(peer->pool_base()));
  std::memset(owner->slot(1, 4), 0x5a, 10000);
  EXPECT_EQ(std::to_integer<int>(peer->slot(1, 4)[0]), 0x5a);
  EXPECT_EQ(std::to_integer<int>(peer->slot(1, 4)[9999]), 0x5a);
  EXPECT_EQ(std::to_integer<int>(peer->slot(1, 3)[0]), 0);
  EXPECT_TRUE(segment::attach(name).ok());  // without an expected geometry
}

TEST_F(SegmentTest, AttachOfAMissingSegmentIsNotFound) {
  auto seg = segment::attach(unique_name());
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), errc::not_found);
}

TEST_F(SegmentTest, AttachRejectsAnotherExpectedGeometry) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  for (const pool_geometry& other :
       {pool_geometry{2, 5, 10000}, pool_geometry{3, 6, 10000}, pool_geometry{3, 5, 10001}}) {
    auto seg = segment::attach(name, &other);
    ASSERT_FALSE(seg.ok());
    EXPECT_EQ(seg.code(), errc::layout_mismatch);
    EXPECT_THAT(seg.error().message(), HasSubstr("expected"));
  }
}

struct bad_header_case {
  const char* what;
  std::function<void(segment_header&)> edit;
  errc code;
  const char* message;
};

TEST_F(SegmentTest, AttachRejectsEveryBadHeader) {
  const std::vector<bad_header_case> cases = {
      {"magic", [](segment_header& h) { h.magic = 0x1234; }, errc::layout_mismatch, "magic"},
      {"version", [](segment_header& h) { h.layout_version = segment_layout_version + 1; },
       errc::layout_mismatch, "layout version"},
      {"resealed version",
       [](segment_header& h) {
         h.layout_version = segment_layout_version + 1;
         reseal(h);
       },
       errc::layout_mismatch, "layout version"},
      {"checksum", [](segment_header& h) { h.layout_checksum = h.layout_checksum + 1; },
       errc::layout_mismatch, "checksum"},
      {"num_slots without checksum", [](segment_header& h) { h.num_slots = 4; },
       errc::layout_mismatch, "checksum"},
      {"world_size without checksum", [](segment_header& h) { h.world_size = 1; },
       errc::layout_mismatch, "checksum"},
      {"resealed num_slots: size no longer matches",
       [](segment_header& h) {
         h.num_slots = 4;
         h.total_bytes = pool_offset + 3 * 4 * 12288;
         reseal(h);
       },
       errc::layout_mismatch, "bytes but its header says"},
      {"resealed stride",
       [](segment_header& h) {
         h.slot_stride = 16384;
         reseal(h);
       },
       errc::layout_mismatch, "inconsistent"},
      {"resealed zero slots",
       [](segment_header& h) {
         h.num_slots = 0;
         reseal(h);
       },
       errc::layout_mismatch, "num_slots"},
      {"ready flag corrupt", [](segment_header& h) { h.ready = 7; }, errc::layout_mismatch,
       "ready"},
      {"not ready", [](segment_header& h) { h.ready = 0; }, errc::not_ready, "being created"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    const auto name = unique_name();
    auto owner = segment::create(name, geo_);
    ASSERT_TRUE(owner.ok());
    edit_header(name, c.edit);
    auto seg = segment::attach(name);
    ASSERT_FALSE(seg.ok());
    EXPECT_EQ(seg.code(), c.code);
    EXPECT_THAT(seg.error().message(), HasSubstr(c.message));
  }
}

TEST_F(SegmentTest, AttachRejectsASegmentWhoseSizeDisagreesWithItsHeader) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(owner->total_bytes() + 4096)), 0);
  ::close(fd);
  auto seg = segment::attach(name);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), errc::layout_mismatch);
}

TEST_F(SegmentTest, AttachOfAnEmptyObjectIsNotReadyAndCreateRefusesIt) {
  const auto name = unique_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(segment::attach(name).code(), errc::not_ready);
  auto seg = segment::create(name, geo_);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), errc::shm_error);
  EXPECT_THAT(seg.error().message(), HasSubstr("without a complete header"));
  EXPECT_TRUE(segment::exists(name).value());
  EXPECT_TRUE(segment::remove(name).ok());
}

TEST_F(SegmentTest, CreateRefusesAForeignObjectAndLeavesIt) {
  const auto name = unique_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  const char junk[128] = "not a kvconnect segment, just bytes";
  ASSERT_EQ(::write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
  ::close(fd);
  auto seg = segment::create(name, geo_);
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), errc::shm_error);
  EXPECT_THAT(seg.error().message(), HasSubstr("not a kvconnect segment"));
  EXPECT_EQ(stat_of(name).st_size, 128);
  EXPECT_TRUE(segment::remove(name).ok());
}

TEST_F(SegmentTest, CreateRefusesALiveSegmentAndChangesNothing) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  std::memset(owner->slot(0, 0), 0x11, 64);
  auto second = segment::create(name, pool_geometry{1, 1, 4096});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.code(), errc::shm_error);
  EXPECT_THAT(second.error().message(), HasSubstr("is alive"));
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(std::to_integer<int>(peer->slot(0, 0)[63]), 0x11);
}

// vLLM builds its workers before its scheduler: whichever side comes first creates the node's
// segment, the other attaches it after checking the geometry.
TEST_F(SegmentTest, CreateOrAttachCreatesAFreeNameAndAttachesALiveOneOfItsGeometry) {
  const auto name = unique_name();
  auto first = segment::create_or_attach(name, geo_);
  ASSERT_TRUE(first.ok()) << first.error().to_string();
  EXPECT_TRUE(first->is_creator());
  std::memset(first->slot(2, 4), 0x5a, 64);
  auto second = segment::create_or_attach(name, geo_);
  ASSERT_TRUE(second.ok()) << second.error().to_string();
  EXPECT_FALSE(second->is_creator());
  EXPECT_EQ(std::to_integer<int>(second->slot(2, 4)[63]), 0x5a);
  auto other = segment::create_or_attach(name, pool_geometry{3, 6, 10000});
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.code(), errc::layout_mismatch);
  // The attacher never removes the name; the creator does.
  std::optional<segment> creator{std::move(first).value()};
  std::optional<segment> attacher{std::move(second).value()};
  attacher.reset();
  EXPECT_TRUE(segment::exists(name).value());
  creator.reset();
  EXPECT_FALSE(segment::exists(name).value());
}

TEST_F(SegmentTest, CreateOrAttachOfASegmentBeingCreatedIsNotReady) {
  const auto name = unique_name();
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_EQ(segment::create_or_attach(name, geo_).code(), errc::not_ready);
  EXPECT_TRUE(segment::remove(name).ok());
}

TEST_F(SegmentTest, TheSchedulerPortIsPublishedOnceAndWithdrawnByItsPublisherOnly) {
  const auto name = unique_name();
  auto seg = segment::create(name, geo_);
  ASSERT_TRUE(seg.ok());
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->scheduler_port(), 0);
  EXPECT_FALSE(peer->publish_scheduler_port(0));
  EXPECT_TRUE(peer->publish_scheduler_port(4711));
  EXPECT_EQ(seg->scheduler_port(), 4711);
  EXPECT_FALSE(seg->publish_scheduler_port(4712));  // another scheduler side serves it
  seg->withdraw_scheduler_port(4712);               // not its port: nothing changes
  EXPECT_EQ(seg->scheduler_port(), 4711);
  peer->withdraw_scheduler_port(4711);
  EXPECT_EQ(seg->scheduler_port(), 0);
}

// A scheduler side that died without withdrawing (its process ended) leaves its port in the
// header; the next scheduler side of that segment takes it over, while a live one keeps it.
TEST_F(SegmentTest, TheNextSchedulerSideTakesOverTheSegmentOfOneThatDied) {
  const auto name = unique_name();
  auto seg = segment::create(name, geo_);
  ASSERT_TRUE(seg.ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a scheduler side that publishes its port and dies
    auto dying = segment::attach(name, &geo_);
    ::_exit(dying.ok() && dying->publish_scheduler_port(4711) ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  EXPECT_EQ(seg->scheduler_port(), 4711);  // left behind

  auto next = segment::attach(name, &geo_);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(next->publish_scheduler_port(4712));
  EXPECT_EQ(seg->scheduler_port(), 4712);
  auto another = segment::attach(name, &geo_);
  ASSERT_TRUE(another.ok());
  EXPECT_FALSE(another->publish_scheduler_port(4713));  // the live side keeps it
  EXPECT_EQ(seg->scheduler_port(), 4712);
  next->withdraw_scheduler_port(4712);
  EXPECT_EQ(seg->scheduler_port(), 0);
  EXPECT_TRUE(another->publish_scheduler_port(4713));
  another->withdraw_scheduler_port(4713);
}

// The lock is the serving object's alone: dropping that object (its process going on) frees it.
TEST_F(SegmentTest, ASchedulerSidesObjectGoneFreesTheSegmentForTheNext) {
  const auto name = unique_name();
  auto seg = segment::create(name, geo_);
  ASSERT_TRUE(seg.ok());
  std::optional<segment> first{std::move(segment::attach(name, &geo_)).value()};
  EXPECT_TRUE(first->publish_scheduler_port(4711));
  EXPECT_FALSE(seg->publish_scheduler_port(4712));
  first.reset();  // as a destroyed scheduler side whose withdraw never ran
  EXPECT_TRUE(seg->publish_scheduler_port(4712));
  seg->withdraw_scheduler_port(4712);
}

TEST_F(SegmentTest, CreateReplacesASegmentWhosePidWasRecycled) {
  // The header names a live pid (ours) but another start time: the process that created it is
  // gone and its pid was reused, so the segment is stale.
  const auto name = unique_name();
  auto created = segment::create(name, geo_);
  ASSERT_TRUE(created.ok());
  std::optional<segment> old_owner{std::move(created).value()};
  edit_header(name, [](segment_header& h) { h.creator_start_time = h.creator_start_time + 1; });
  auto fresh = segment::create(name, pool_geometry{1, 2, 4096});
  ASSERT_TRUE(fresh.ok()) << fresh.error().to_string();
  EXPECT_EQ(stat_of(name).st_size, static_cast<off_t>(fresh->total_bytes()));
  // The replaced owner must not remove the new segment when it closes.
  old_owner.reset();
  EXPECT_TRUE(segment::exists(name).value());
  auto peer = segment::attach(name);
  ASSERT_TRUE(peer.ok());
  EXPECT_EQ(peer->geometry(), (pool_geometry{1, 2, 4096}));
}

// What a launcher removes after its scheduler ended: the segment that scheduler left, never one
// that another live process created under the same name (issue 23: a refused second launch of
// an instance removed the first launch's live segment).
TEST_F(SegmentTest, ALauncherRemovesOnlyTheSegmentItsOwnGoneCreatorLeft) {
  const auto name = unique_name();
  const pid_t me = ::getpid();
  auto created = segment::create(name, geo_, {.remove_on_close = false});
  ASSERT_TRUE(created.ok()) << created.error().to_string();
  // Live (its creator, this process, runs): nobody's to remove, whoever the launcher started.
  EXPECT_EQ(remove_segment_left_by(name, me).value(), false);
  EXPECT_EQ(remove_segment_left_by(name, me + 1).value(), false);
  EXPECT_TRUE(segment::exists(name).value());
  // Its creator gone (the pid recycled, as after a SIGKILL): only that creator's launcher
  // removes it.
  edit_header(name, [](segment_header& h) { h.creator_start_time = h.creator_start_time + 1; });
  EXPECT_EQ(remove_segment_left_by(name, me + 1).value(), false);
  EXPECT_TRUE(segment::exists(name).value());
  EXPECT_EQ(remove_segment_left_by(name, me).value(), true);
  EXPECT_FALSE(segment::exists(name).value());
  EXPECT_EQ(remove_segment_left_by(name, me).value(), false);  // absent: nothing to do
}

TEST_F(SegmentTest, CreateFailsCleanlyWhenDevShmIsTooSmall) {
  struct statvfs vfs {};
  ASSERT_EQ(::statvfs("/dev/shm", &vfs), 0);
  const uint64_t fs_bytes = uint64_t{vfs.f_blocks} * vfs.f_frsize;
  const auto name = unique_name();
  auto seg = segment::create(name, pool_geometry{1, 2, fs_bytes});
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.code(), errc::capacity_exhausted);
  EXPECT_THAT(seg.error().message(), HasSubstr("/dev/shm"));
  EXPECT_FALSE(segment::exists(name).value());
}

TEST_F(SegmentTest, BadNamesAndGeometriesAreRejectedAndCreateNothing) {
  for (const char* bad : {"", "/", "kvc-no-slash", "/a/b", "/sp ace", "/semi;colon"}) {
    EXPECT_EQ(segment::create(bad, geo_).code(), errc::invalid_argument) << bad;
    EXPECT_EQ(segment::attach(bad).code(), errc::invalid_argument) << bad;
    EXPECT_EQ(segment::remove(bad).code(), errc::invalid_argument) << bad;
    EXPECT_EQ(segment::exists(bad).code(), errc::invalid_argument) << bad;
  }
  const auto name = unique_name();
  EXPECT_EQ(segment::create(name, pool_geometry{0, 1, 1}).code(), errc::invalid_argument);
  EXPECT_EQ(segment::create(name, pool_geometry{1, 0, 1}).code(), errc::invalid_argument);
  EXPECT_EQ(segment::create(name, pool_geometry{1, 1, 0}).code(), errc::invalid_argument);
  EXPECT_FALSE(segment::exists(name).value());
}

TEST_F(SegmentTest, CreateReservesTheWholePoolSoNoWorkerCanRunOutMidRun) {
  // tmpfs allocates the pages at create, prefault or not: a pool that does not fit fails there
  // (capacity_exhausted), never with a SIGBUS in a worker that touches a page later.
  const auto name = unique_name();
  auto lazy = segment::create(name, geo_);
  ASSERT_TRUE(lazy.ok());
  EXPECT_EQ(static_cast<uint64_t>(stat_of(name).st_blocks) * 512, lazy->total_bytes());
  const auto name2 = unique_name();
  auto eager = segment::create(name2, geo_, {.prefault = true});
  ASSERT_TRUE(eager.ok());
  EXPECT_EQ(static_cast<uint64_t>(stat_of(name2).st_blocks) * 512, eager->total_bytes());
}

TEST_F(SegmentTest, PrefaultRankKeepsItsBytesAndRefusesAnUnknownRank) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok());
  std::memset(owner->slot(1, 2), 0x77, 100);
  ASSERT_TRUE(peer->prefault_rank(1).ok());
  EXPECT_EQ(std::to_integer<int>(peer->slot(1, 2)[99]), 0x77);
  EXPECT_EQ(std::to_integer<int>(peer->slot(1, 2)[100]), 0);
  EXPECT_EQ(peer->prefault_rank(3).code(), errc::invalid_argument);
}

// A worker places its rank's pages on its GPU's NUMA node before faulting them in: the region
// then carries that policy (node 0 exists on every machine), and the pages land there.
TEST_F(SegmentTest, ARankRegionPreferringANodeFaultsItsPagesInThere) {
  const auto name = unique_name();
  auto owner = segment::create(name, geo_);
  ASSERT_TRUE(owner.ok());
  auto peer = segment::attach(name, &geo_);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(peer->prefer_numa_node(1, 0).ok());
  ASSERT_TRUE(peer->prefault_rank(1).ok());
  int mode = -1;
  std::array<unsigned long, 16> mask{};
  ASSERT_EQ(::get_mempolicy(&mode, mask.data(), mask.size() * 64, peer->slot(1, 1), MPOL_F_ADDR),
            0);
  EXPECT_EQ(mode, MPOL_PREFERRED);
  EXPECT_EQ(mask[0] & 1ul, 1ul) << "the policy does not name node 0";
  int node = -1;
  ASSERT_EQ(::get_mempolicy(&node, nullptr, 0, peer->slot(1, 1), MPOL_F_NODE | MPOL_F_ADDR), 0);
  EXPECT_EQ(node, 0);
  EXPECT_EQ(peer->prefer_numa_node(3, 0).code(), errc::invalid_argument);
  EXPECT_EQ(peer->prefer_numa_node(0, -1).code(), errc::invalid_argument);
  EXPECT_EQ(peer->prefer_numa_node(0, 1000).code(), errc::invalid_argument);  // no such node
}

TEST_F(SegmentTest, MovedSegmentKeepsOwnership) {
  const auto name = unique_name();
  auto created = segment::create(name, geo_);
  ASSERT_TRUE(created.ok());
  segment moved = std::move(created).value();
  EXPECT_EQ(moved.name(), name);
  EXPECT_TRUE(segment::exists(name).value());
}

TEST(ProcessIdentityTest, OwnProcessIsAliveOnlyWithItsStartTime) {
  auto start = process_start_time(::getpid());
  ASSERT_TRUE(start.ok());
  EXPECT_TRUE(process_alive(::getpid(), *start));
  EXPECT_FALSE(process_alive(::getpid(), *start + 1));
  EXPECT_FALSE(process_alive(0, *start));
  EXPECT_FALSE(process_alive(-1, *start));
  EXPECT_EQ(process_start_time(-5).code(), errc::invalid_argument);
}

}  // namespace
}  // namespace kvc::shm
