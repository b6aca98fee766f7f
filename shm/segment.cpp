#include "shm/segment.hpp"

#include <fcntl.h>
#include <numaif.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <utility>

#include "shm/process_identity.hpp"
#include "shm/segment_header.hpp"

namespace kvc::shm {
namespace bip = boost::interprocess;

namespace {

constexpr uint64_t map_alignment = pool_offset;  // 2 MiB
constexpr const char* shm_dir = "/dev/shm";

std::string errno_text(int err) { return std::strerror(err); }

status from_boost(const bip::interprocess_exception& e, std::string_view what,
                  std::string_view name) {
  const errc code = e.get_error_code() == bip::not_found_error ? errc::not_found : errc::shm_error;
  return make_error(code, std::string(what) + " " + std::string(name) + ": " + e.what());
}

status validate_name(std::string_view name) {
  if (name.size() < 2 || name.size() > 255 || name.front() != '/') {
    return make_error(errc::invalid_argument,
                      "segment name must be '/' followed by 1 to 254 characters: '" +
                          std::string(name) + "'");
  }
  for (char c : name.substr(1)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) {
      return make_error(errc::invalid_argument,
                        "segment name may only hold [A-Za-z0-9._-] after '/': '" +
                            std::string(name) + "'");
    }
  }
  return status::success();
}

std::string describe(const pool_geometry& g) {
  return "world_size " + std::to_string(g.world_size) + ", num_slots " +
         std::to_string(g.num_slots) + ", slot_bytes " + std::to_string(g.slot_bytes);
}

/// Maps `bytes` of `shm` at a 2 MiB-aligned address: reserves bytes + 2 MiB of address space,
/// maps the segment with MAP_FIXED at the first aligned address inside, and returns the
/// reservation's leftovers (head and tail) to the system.
result<bip::mapped_region> map_aligned(const bip::shared_memory_object& shm, uint64_t bytes,
                                       bool populate, std::string_view name) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (bytes == 0 || bytes % page != 0) {
    return make_error(errc::internal, "segment size is not a whole number of pages");
  }
  const uint64_t reserve_bytes = bytes + map_alignment;
  void* reserve = ::mmap(nullptr, reserve_bytes, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserve == MAP_FAILED) {
    return make_error(errc::shm_error, "cannot reserve " + std::to_string(reserve_bytes) +
                                           " bytes of address space for " + std::string(name) +
                                           ": " + errno_text(errno));
  }
  const auto begin = reinterpret_cast<uintptr_t>(reserve);
  const uintptr_t aligned = (begin + map_alignment - 1) & ~uintptr_t{map_alignment - 1};
  try {
    const int flags = MAP_FIXED | (populate ? MAP_POPULATE : 0);
    bip::mapped_region region(shm, bip::read_write, 0, bytes, reinterpret_cast<void*>(aligned),
                              flags);
    if (aligned > begin) ::munmap(reserve, aligned - begin);
    const uintptr_t tail = aligned + bytes;
    if (begin + reserve_bytes > tail) {
      ::munmap(reinterpret_cast<void*>(tail), begin + reserve_bytes - tail);
    }
    return region;
  } catch (const bip::interprocess_exception& e) {
    ::munmap(reserve, reserve_bytes);  // a failed MAP_FIXED may have left part of it
    return from_boost(e, "cannot map", name);
  }
}

/// What a create() finds when the name is taken.
enum class occupant { stale, live, being_created, foreign };

struct inspection {
  occupant kind = occupant::foreign;
  pid_t pid = 0;
};

result<inspection> inspect(const std::string& name) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_only);
    bip::offset_t size = 0;
    if (!shm.get_size(size)) return make_error(errc::shm_error, "cannot stat " + name);
    if (static_cast<uint64_t>(size) < sizeof(segment_header)) {
      return inspection{occupant::being_created, 0};
    }
    bip::mapped_region region(shm, bip::read_only, 0, sizeof(segment_header));
    const auto* h = static_cast<const segment_header*>(region.get_address());
    const uint64_t magic = h->magic.load(std::memory_order_acquire);
    const auto pid = static_cast<pid_t>(h->creator_pid.load(std::memory_order_acquire));
    const uint64_t start = h->creator_start_time.load(std::memory_order_acquire);
    if (magic == 0 && pid == 0) return inspection{occupant::being_created, 0};
    if (magic != segment_magic) return inspection{occupant::foreign, 0};
    if (pid <= 0) return inspection{occupant::being_created, 0};
    return inspection{process_alive(pid, start) ? occupant::live : occupant::stale, pid};
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "cannot inspect existing segment", name);
  }
}

status check_free_space(uint64_t bytes, const std::string& name) {
  struct statvfs vfs {};
  if (::statvfs(shm_dir, &vfs) != 0) {
    return make_error(errc::shm_error,
                      std::string("cannot statvfs ") + shm_dir + ": " + errno_text(errno));
  }
  const uint64_t free_bytes = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  if (free_bytes < bytes) {
    return make_error(errc::capacity_exhausted,
                      "segment " + name + " needs " + std::to_string(bytes) + " bytes but " +
                          shm_dir + " has only " + std::to_string(free_bytes) + " free");
  }
  return status::success();
}

struct file_id {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const file_id&) const = default;
};

std::optional<file_id> id_of_fd(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::nullopt;
  return file_id{st.st_dev, st.st_ino};
}

std::optional<file_id> id_of_name(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return std::nullopt;
  auto id = id_of_fd(fd);
  ::close(fd);
  return id;
}

/// Checks a header that claims to be complete against itself, its file size and `expected`.
status validate_header(const segment_header& h, uint64_t file_size, const pool_geometry* expected,
                       const std::string& name, pool_geometry& out) {
  const uint32_t ready = h.ready.load(std::memory_order_acquire);
  const uint64_t magic = h.magic.load(std::memory_order_relaxed);
  if (magic != segment_magic) {
    if (magic == 0 && ready == 0) {
      return make_error(errc::not_ready, "segment " + name + " is still being created");
    }
    return make_error(errc::layout_mismatch, "segment " + name + " has a bad magic (not a "
                                             "kvconnect segment)");
  }
  if (ready == 0) return make_error(errc::not_ready, "segment " + name + " is still being created");
  if (ready != 1) {
    return make_error(errc::layout_mismatch, "segment " + name + " has a corrupt ready flag");
  }
  const uint32_t version = h.layout_version.load(std::memory_order_relaxed);
  if (version != segment_layout_version) {
    return make_error(errc::layout_mismatch,
                      "segment " + name + " has layout version " + std::to_string(version) +
                          ", this build reads version " + std::to_string(segment_layout_version));
  }
  const pool_geometry g{h.world_size.load(std::memory_order_relaxed),
                        h.num_slots.load(std::memory_order_relaxed),
                        h.slot_bytes.load(std::memory_order_relaxed)};
  const uint64_t stride = h.slot_stride.load(std::memory_order_relaxed);
  const uint64_t pool_off = h.pool_offset.load(std::memory_order_relaxed);
  const uint64_t total = h.total_bytes.load(std::memory_order_relaxed);
  const uint64_t sum = h.layout_checksum.load(std::memory_order_relaxed);
  if (sum != layout_checksum(version, g.world_size, g.num_slots, g.slot_bytes, stride, pool_off,
                             total)) {
    return make_error(errc::layout_mismatch,
                      "segment " + name + " has a layout checksum that does not match its header");
  }
  if (auto st = validate(g); !st) {
    return make_error(errc::layout_mismatch, "segment " + name + ": " + st.message());
  }
  if (stride != g.slot_stride() || pool_off != pool_offset || total != g.segment_bytes()) {
    return make_error(errc::layout_mismatch,
                      "segment " + name + " has a stride, pool offset or size inconsistent with "
                                          "its geometry (" + describe(g) + ")");
  }
  if (file_size != total) {
    return make_error(errc::layout_mismatch,
                      "segment " + name + " is " + std::to_string(file_size) +
                          " bytes but its header says " + std::to_string(total));
  }
  if (expected != nullptr && !(*expected == g)) {
    return make_error(errc::layout_mismatch, "segment " + name + " has " + describe(g) +
                                                 ", expected " + describe(*expected));
  }
  out = g;
  return status::success();
}

}  // namespace

std::string segment_name(uint32_t uid, std::string_view instance, uint32_t node) {
  std::string out = "/kvc-" + std::to_string(uid) + "-";
  out += instance;
  out += "-node" + std::to_string(node);
  return out;
}

struct segment::impl {
  std::string name;
  bip::shared_memory_object shm;
  bip::mapped_region region;
  pool_geometry geo;
  uint64_t checksum = 0;
  pid_t creator = 0;
  bool creator_here = false;
  bool remove_on_close = false;
  /// publish_scheduler_port succeeded: this object holds the file's lock (its fd's, released
  /// by withdraw_scheduler_port or when the fd closes).
  bool serves_scheduler = false;
  file_id id;

  std::byte* base() const noexcept { return static_cast<std::byte*>(region.get_address()); }

  ~impl() {
    if (!creator_here || !remove_on_close) return;
    // Remove only the segment this object created: the name may since have been taken over
    // (a stale-replacement by another creator).
    if (id_of_name(name) == std::optional<file_id>{id}) ::shm_unlink(name.c_str());
  }
};

segment::segment(std::unique_ptr<impl> p) noexcept : impl_(std::move(p)) {}
segment::segment(segment&&) noexcept = default;
segment& segment::operator=(segment&&) noexcept = default;
segment::~segment() = default;

result<segment> segment::create(std::string_view name_view, const pool_geometry& geometry,
                                const create_options& opts) {
  return create_impl(name_view, geometry, opts, /*attach_live=*/false);
}

result<segment> segment::create_or_attach(std::string_view name_view, const pool_geometry& geometry,
                                          const create_options& opts) {
  return create_impl(name_view, geometry, opts, /*attach_live=*/true);
}

result<segment> segment::create_impl(std::string_view name_view, const pool_geometry& geometry,
                                     const create_options& opts, bool attach_live) {
  if (auto st = validate_name(name_view); !st) return st;
  if (auto st = validate(geometry); !st) return st;
  const std::string name(name_view);
  const uint64_t total = geometry.segment_bytes();

  std::optional<bip::shared_memory_object> shm;
  for (int attempt = 0; attempt < 2 && !shm; ++attempt) {
    try {
      shm.emplace(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
    } catch (const bip::interprocess_exception& e) {
      if (e.get_error_code() != bip::already_exists_error || attempt == 1) {
        return from_boost(e, "cannot create segment", name);
      }
      auto found = inspect(name);
      if (!found) return found.error();
      switch (found->kind) {
        case occupant::live:
          if (attach_live) return attach(name, &geometry);
          return make_error(errc::shm_error, "segment " + name + " is in use: its creator pid " +
                                                 std::to_string(found->pid) + " is alive");
        case occupant::being_created:
          if (attach_live) {
            return make_error(errc::not_ready, "segment " + name + " is being created");
          }
          return make_error(errc::shm_error,
                            "segment " + name + " exists without a complete header (being "
                                                "created by another process?); remove " +
                                std::string(shm_dir) + name + " if no process owns it");
        case occupant::foreign:
          return make_error(errc::shm_error, "segment " + name +
                                                 " exists and is not a kvconnect segment");
        case occupant::stale:
          if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
            return make_error(errc::shm_error, "cannot remove stale segment " + name + ": " +
                                                   errno_text(errno));
          }
          break;
      }
    }
  }

  // From here on the name is ours: any failure removes it again.
  auto fail = [&](status st) -> result<segment> {
    ::shm_unlink(name.c_str());
    return st;
  };
  if (auto st = check_free_space(total, name); !st) return fail(std::move(st));
  const auto start = process_start_time(::getpid());
  if (!start) return fail(start.error());
  const auto id = id_of_fd(shm->get_mapping_handle().handle);
  if (!id) return fail(make_error(errc::shm_error, "cannot fstat segment " + name));
  // Sizes the segment and reserves its pages in /dev/shm now (tmpfs allocates them): a pool
  // that does not fit is a clear error here, never a SIGBUS in a worker mid-run, also when
  // another pool took the space after check_free_space.
  if (const int err = ::posix_fallocate(shm->get_mapping_handle().handle, 0,
                                        static_cast<off_t>(total));
      err != 0) {
    return fail(make_error(err == ENOSPC ? errc::capacity_exhausted : errc::shm_error,
                           "cannot reserve " + std::to_string(total) + " bytes for segment " +
                               name + " in " + shm_dir + ": " + errno_text(err)));
  }
  auto region = map_aligned(*shm, total, opts.prefault, name);
  if (!region) return fail(region.error());

  auto* h = new (region->get_address()) segment_header;
  h->magic.store(segment_magic, std::memory_order_relaxed);
  h->layout_version.store(segment_layout_version, std::memory_order_relaxed);
  h->creator_pid.store(::getpid(), std::memory_order_relaxed);
  h->creator_start_time.store(*start, std::memory_order_release);
  h->world_size.store(geometry.world_size, std::memory_order_relaxed);
  h->num_slots.store(geometry.num_slots, std::memory_order_relaxed);
  h->slot_bytes.store(geometry.slot_bytes, std::memory_order_relaxed);
  h->slot_stride.store(geometry.slot_stride(), std::memory_order_relaxed);
  h->pool_offset.store(pool_offset, std::memory_order_relaxed);
  h->total_bytes.store(total, std::memory_order_relaxed);
  h->layout_checksum.store(shm::layout_checksum(geometry), std::memory_order_relaxed);
  h->scheduler_port.store(0, std::memory_order_relaxed);
  h->reserved.store(0, std::memory_order_relaxed);
  h->ready.store(1, std::memory_order_release);

  auto p = std::make_unique<impl>();
  p->name = name;
  p->shm = std::move(*shm);
  p->region = std::move(region).value();
  p->geo = geometry;
  p->checksum = shm::layout_checksum(geometry);
  p->creator = ::getpid();
  p->creator_here = true;
  p->remove_on_close = opts.remove_on_close;
  p->id = *id;
  return segment(std::move(p));
}

result<segment> segment::attach(std::string_view name_view, const pool_geometry* expected) {
  if (auto st = validate_name(name_view); !st) return st;
  const std::string name(name_view);
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!shm.get_size(size)) return make_error(errc::shm_error, "cannot stat segment " + name);
    if (static_cast<uint64_t>(size) < sizeof(segment_header)) {
      return make_error(errc::not_ready, "segment " + name + " is still being created (" +
                                             std::to_string(size) + " bytes)");
    }
    pool_geometry g;
    {
      // Validate through a header-only mapping before mapping a pool of unknown shape.
      bip::mapped_region header(shm, bip::read_only, 0, sizeof(segment_header));
      const auto* h = static_cast<const segment_header*>(header.get_address());
      if (auto st = validate_header(*h, size, expected, name, g); !st) return st;
    }
    auto region = map_aligned(shm, g.segment_bytes(), /*populate=*/false, name);
    if (!region) return region.error();
    const auto* h = static_cast<const segment_header*>(region->get_address());
    pool_geometry again;
    if (auto st = validate_header(*h, size, &g, name, again); !st) return st;

    auto p = std::make_unique<impl>();
    p->name = name;
    p->shm = std::move(shm);
    p->region = std::move(region).value();
    p->geo = g;
    p->checksum = h->layout_checksum.load(std::memory_order_relaxed);
    p->creator = static_cast<pid_t>(h->creator_pid.load(std::memory_order_relaxed));
    return segment(std::move(p));
  } catch (const bip::interprocess_exception& e) {
    return from_boost(e, "cannot attach segment", name);
  }
}

status segment::remove(std::string_view name_view) {
  if (auto st = validate_name(name_view); !st) return st;
  const std::string name(name_view);
  if (::shm_unlink(name.c_str()) == 0) return status::success();
  const int err = errno;
  if (err == ENOENT) return make_error(errc::not_found, "no segment " + name);
  return make_error(errc::shm_error, "cannot remove segment " + name + ": " + errno_text(err));
}

result<bool> segment::exists(std::string_view name_view) {
  if (auto st = validate_name(name_view); !st) return st;
  const std::string name(name_view);
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  const int err = errno;
  if (err == ENOENT) return false;
  if (err == EACCES) return true;  // exists, owned by someone else
  return make_error(errc::shm_error, "cannot look up segment " + name + ": " + errno_text(err));
}

result<std::optional<pid_t>> segment::stale_creator(std::string_view name_view) {
  if (auto st = validate_name(name_view); !st) return st;
  const std::string name(name_view);
  auto found = inspect(name);
  if (!found) return found.error();
  if (found->kind != occupant::stale) return std::optional<pid_t>{};
  return std::optional<pid_t>{found->pid};
}

std::byte* segment::pool_base() const noexcept { return impl_->base() + pool_offset; }

std::byte* segment::slot(rank_id r, cpu_slot s) const noexcept {
  const auto& g = impl_->geo;
  if (r >= g.world_size || s >= g.num_slots) return nullptr;
  return pool_base() + (uint64_t{r} * g.num_slots + s) * g.slot_stride();
}

std::span<std::byte> segment::rank_region(rank_id r) const noexcept {
  const auto& g = impl_->geo;
  if (r >= g.world_size) return {};
  return {pool_base() + uint64_t{r} * g.rank_bytes(), g.rank_bytes()};
}

status segment::prefault_rank(rank_id r) {
  const auto region = rank_region(r);
  if (region.empty()) {
    return make_error(errc::invalid_argument, "rank " + std::to_string(r) + " is not in [0, " +
                                                  std::to_string(impl_->geo.world_size) + ")");
  }
  if (::madvise(region.data(), region.size(), MADV_POPULATE_WRITE) == 0) {
    return status::success();
  }
  const int err = errno;
  if (err != EINVAL) {
    return make_error(err == ENOMEM || err == EFAULT ? errc::capacity_exhausted : errc::shm_error,
                      "cannot prefault rank " + std::to_string(r) + " of " + impl_->name + ": " +
                          errno_text(err));
  }
  // Kernel before 5.14: touch each page without changing it.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t off = 0; off < region.size(); off += page) {
    auto* p = reinterpret_cast<volatile std::atomic<uint8_t>*>(region.data() + off);
    p->fetch_add(0, std::memory_order_relaxed);
  }
  return status::success();
}

status segment::prefer_numa_node(rank_id r, int node) {
  const auto region = rank_region(r);
  if (region.empty() || node < 0) {
    return make_error(errc::invalid_argument, "prefer NUMA node " + std::to_string(node) +
                                                  " for rank " + std::to_string(r) +
                                                  ": no such rank, or a negative node");
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = (reinterpret_cast<uintptr_t>(region.data()) + page - 1) / page * page;
  const auto last = (reinterpret_cast<uintptr_t>(region.data()) + region.size()) / page * page;
  if (last <= first) return status::success();  // less than a page: nothing to place
  constexpr size_t mask_bits = sizeof(unsigned long) * 8 * 16;  // 1024 nodes
  if (static_cast<size_t>(node) >= mask_bits) {
    return make_error(errc::invalid_argument,
                      "prefer NUMA node " + std::to_string(node) + ": beyond node 1023");
  }
  std::array<unsigned long, mask_bits / (sizeof(unsigned long) * 8)> mask{};
  mask[static_cast<size_t>(node) / (sizeof(unsigned long) * 8)] |=
      1ul << (static_cast<size_t>(node) % (sizeof(unsigned long) * 8));
  if (::mbind(reinterpret_cast<void*>(first), last - first, MPOL_PREFERRED, mask.data(),
              mask_bits + 1, 0) != 0) {
    const int err = errno;
    return make_error(err == EINVAL ? errc::invalid_argument : errc::shm_error,
                      "prefer NUMA node " + std::to_string(node) + " for rank " +
                          std::to_string(r) + " of " + impl_->name + ": " + errno_text(err));
  }
  return status::success();
}

const pool_geometry& segment::geometry() const noexcept { return impl_->geo; }
uint64_t segment::layout_checksum() const noexcept { return impl_->checksum; }
const std::string& segment::name() const noexcept { return impl_->name; }
uint64_t segment::total_bytes() const noexcept { return impl_->geo.segment_bytes(); }
pid_t segment::creator_pid() const noexcept { return impl_->creator; }

uint16_t segment::scheduler_port() const noexcept {
  const auto* h = reinterpret_cast<const segment_header*>(impl_->base());
  return static_cast<uint16_t>(h->scheduler_port.load(std::memory_order_acquire));
}

bool segment::publish_scheduler_port(uint16_t port) const noexcept {
  if (port == 0) return false;
  impl& m = *impl_;
  // The scheduler side holds the segment file's lock (on its own open file description) for as
  // long as it serves the segment; the kernel drops it when that process ends, however it ends.
  // So a port found with the lock free is a dead side's, taken over here, and a live side's
  // lock refuses the claim without anything being written.
  if (!m.serves_scheduler && ::flock(m.shm.get_mapping_handle().handle, LOCK_EX | LOCK_NB) != 0) {
    return false;
  }
  m.serves_scheduler = true;
  auto* h = reinterpret_cast<segment_header*>(m.base());
  h->scheduler_port.store(port, std::memory_order_release);
  return true;
}

void segment::withdraw_scheduler_port(uint16_t port) const noexcept {
  impl& m = *impl_;
  auto* h = reinterpret_cast<segment_header*>(m.base());
  uint32_t mine = port;
  if (!h->scheduler_port.compare_exchange_strong(mine, 0, std::memory_order_acq_rel)) return;
  if (m.serves_scheduler) {
    ::flock(m.shm.get_mapping_handle().handle, LOCK_UN);
    m.serves_scheduler = false;
  }
}

bool segment::is_creator() const noexcept { return impl_->creator_here; }

}  // namespace kvc::shm
