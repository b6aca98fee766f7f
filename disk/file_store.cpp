#include "disk/file_store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "proto/frame_checksum.hpp"
#include "proto/private_files.hpp"

namespace kvc::disk {

namespace {

constexpr std::string_view temp_marker = ".tmp.";
constexpr std::string_view config_name = "config.txt";

std::string errno_text(int e) { return std::strerror(e); }

status io_failed(const std::string& what, const std::string& path, int e) {
  return make_error(errc::io_error, what + " " + path + ": " + errno_text(e));
}

/// The scratch slot of the calling thread for write/read/check (one I/O at a time per thread).
io_slot& thread_slot() {
  thread_local io_slot slot;
  return slot;
}

bool page_aligned(const void* p) noexcept {
  return reinterpret_cast<uintptr_t>(p) % page_bytes == 0;
}

status wrong_size(std::string_view what, uint64_t got, uint64_t want) {
  return make_error(errc::invalid_argument, "file tier: " + std::string{what} + " of " +
                                                std::to_string(got) + " bytes, expected " +
                                                std::to_string(want));
}

/// Writes `text` to `path` via a temp file and a rename (0600).
status write_small_file(const std::string& path, std::string_view text) {
  const std::string temp = path + std::string{temp_marker} + std::to_string(::getpid());
  auto fd = create_private_file(temp);
  if (!fd) return fd.error();
  size_t done = 0;
  int err = 0;
  while (done < text.size() && err == 0) {
    const ssize_t n = ::write(*fd, text.data() + done, text.size() - done);
    if (n < 0 && errno != EINTR) err = errno;
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (::close(*fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(temp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.c_str());
    return io_failed("cannot write", path, err);
  }
  return status::success();
}

result<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return make_error(errc::not_found, path);
    return io_failed("cannot read", path, errno);
  }
  std::string text;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return io_failed("cannot read", path, e);
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > (size_t{1} << 20)) break;  // not ours: compared and refused below
  }
  ::close(fd);
  return text;
}

std::string hex_byte(uint8_t b) {
  static constexpr char digits[] = "0123456789abcdef";
  return {digits[b >> 4], digits[b & 0xf]};
}

}  // namespace

capacity_split split_capacity(uint64_t capacity_bytes, uint64_t block_file_bytes,
                              uint32_t max_recycled) noexcept {
  if (block_file_bytes == 0) return {capacity_bytes, 0};
  const uint64_t files = capacity_bytes / block_file_bytes;
  const auto recycled = static_cast<uint32_t>(std::min<uint64_t>(max_recycled, files / 8));
  return {capacity_bytes - recycled * block_file_bytes, recycled};
}

result<std::unique_ptr<file_store>> file_store::open(const file_store_options& options) {
  if (options.payload_bytes == 0) {
    return make_error(errc::invalid_argument, "file tier: a block of 0 bytes");
  }
  if (options.root_dir.empty()) {
    return make_error(errc::invalid_argument, "file tier: no root_dir");
  }
  const run_digest digest = digest_of(options.run_description);
  std::string rank_dir =
      options.root_dir + "/" + digest.hex() + "/" + std::to_string(options.rank);
  std::unique_ptr<file_store> store{new file_store(options, std::move(rank_dir))};
  if (auto s = store->prepare(); !s) return s;
  if (auto s = store->scan(); !s) return s;
  return store;
}

file_store::file_store(const file_store_options& options, std::string rank_dir)
    : root_dir_(options.root_dir),
      run_description_(options.run_description),
      run_dir_(options.root_dir + "/" + digest_of(options.run_description).hex()),
      rank_dir_(std::move(rank_dir)),
      id_{.payload_bytes = options.payload_bytes,
          .run = digest_of(options.run_description),
          .rank = options.rank},
      want_direct_(options.direct_io),
      max_recycled_(options.recycled_files) {}

file_store::~file_store() {
  for (const std::string& path : recycled_) ::unlink(path.c_str());
}

std::string file_store::temp_name(const std::string& path) {
  static std::atomic<uint64_t> temp_counter{0};
  return path + std::string{temp_marker} + std::to_string(::getpid()) + "." +
         std::to_string(temp_counter.fetch_add(1));
}

int file_store::open_recycled(block_transfer& t) {
  std::string kept;
  {
    std::lock_guard lock{recycled_mu_};
    if (recycled_.empty()) return -1;
    kept = std::move(recycled_.back());
    recycled_.pop_back();
  }
  // Already a temp name: written in place, then renamed to the block's name like any write.
  const int fd = ::open(kept.c_str(), open_flags(O_WRONLY));
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == t.expected) {
    t.temp = std::move(kept);
    return fd;  // overwritten in full by the write
  }
  if (fd >= 0) ::close(fd);
  ::unlink(kept.c_str());
  return -1;
}

status file_store::prepare() {
  struct stat st {};
  if (::stat(root_dir_.c_str(), &st) != 0) return io_failed("file tier: root_dir", root_dir_, errno);
  if (!S_ISDIR(st.st_mode)) {
    return make_error(errc::io_error, "file tier: root_dir " + root_dir_ + " is not a directory");
  }
  if (auto s = make_private_dir(rank_dir_); !s) return s;
  const std::string config = run_dir_ + "/" + std::string{config_name};
  const std::string want = run_description_ + "\n";
  auto had = read_small_file(config);
  if (!had && had.code() != errc::not_found) return had.error();
  if (!had) {
    if (auto s = write_small_file(config, want); !s) return s;
  } else if (*had != want) {
    return make_error(errc::layout_mismatch,
                      "file tier: " + config + " describes another run; refusing its files");
  }
  if (!want_direct_) {
    direct_note_ = "O_DIRECT off by configuration";
    return status::success();
  }
  // Probe O_DIRECT with one aligned page: tmpfs refuses the open (EINVAL), some file systems
  // only the write.
  const std::string probe = rank_dir_ + "/direct_probe" + std::string{temp_marker} +
                            std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0600);
  if (fd < 0) {
    direct_note_ = "O_DIRECT refused by the file system of " + root_dir_ + " (" +
                   errno_text(errno) + "): buffered I/O";
    ::unlink(probe.c_str());
    return status::success();
  }
  io_slot slot;
  const auto page = slot.get(page_bytes);
  std::fill(page.begin(), page.end(), '\0');
  const ssize_t n = ::pwrite(fd, page.data(), page.size(), 0);
  const int e = errno;
  ::close(fd);
  ::unlink(probe.c_str());
  if (n == static_cast<ssize_t>(page_bytes)) {
    direct_ = true;
  } else {
    direct_note_ = "O_DIRECT write refused on " + root_dir_ + " (" +
                   (n < 0 ? errno_text(e) : std::string{"short write"}) + "): buffered I/O";
  }
  return status::success();
}

status file_store::scan() {
  struct entry {
    int64_t mtime_ns;
    block_key key;
  };
  std::vector<entry> entries;
  for (int i = 0; i < 256; ++i) {
    const std::string dir = rank_dir_ + "/" + hex_byte(static_cast<uint8_t>(i));
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr && errno == ENOENT) continue;  // made at the first write into it
    if (d == nullptr) return io_failed("file tier: cannot list", dir, errno);
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      const std::string path = dir + "/" + std::string{name};
      if (name.find(temp_marker) != std::string_view::npos) {
        ::unlink(path.c_str());  // a write a crash interrupted
        continue;
      }
      const auto key = key_of_file_name(name);
      if (!key) continue;  // ".", "..", files that are not ours
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      entries.push_back({int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec, *key});
    }
    ::closedir(d);
  }
  std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    return std::tie(a.mtime_ns, a.key) < std::tie(b.mtime_ns, b.key);
  });
  found_.clear();
  for (const entry& e : entries) found_.push_back(e.key);
  return status::success();
}

std::string file_store::path_of(const block_key& key) const {
  const std::string name = file_name(key);
  return rank_dir_ + "/" + name.substr(0, 2) + "/" + name;
}

int file_store::open_flags(int base) const noexcept {
  return base | O_CLOEXEC | (direct_ ? O_DIRECT : 0);
}

status file_store::write(const block_key& key, std::span<const char> payload) {
  block_transfer t;
  if (auto s = begin_write(key, payload, thread_slot(), t); !s) return s;
  transfer_blocking(t);
  return finish(t);
}

status file_store::read(const block_key& key, std::span<char> into) {
  block_transfer t;
  if (auto s = begin_read(key, into, thread_slot(), t); !s) return s;
  transfer_blocking(t);
  return finish(t);
}

status file_store::check(const block_key& key) {
  block_transfer t;
  if (auto s = begin_check(key, thread_slot(), t); !s) return s;
  transfer_blocking(t);
  return finish(t);
}

status file_store::begin_write(const block_key& key, std::span<const char> payload, io_slot& slot,
                               block_transfer& t, bool defer_create) {
  if (payload.size() != id_.payload_bytes) {
    return wrong_size("a block", payload.size(), id_.payload_bytes);
  }
  t.op = transfer_op::write;
  t.key = key;
  t.path = path_of(key);
  t.temp = temp_name(t.path);
  // Page-aligned KV is written from where it is: the header and the last partial page come
  // from the slot. Other KV is staged in the slot whole.
  const bool direct_from = page_aligned(payload.data());
  const size_t body = direct_from ? payload.size() / page_bytes * page_bytes : 0;
  const size_t rest = payload.size() - body;
  const size_t staged = header_bytes + (rest + page_bytes - 1) / page_bytes * page_bytes;
  t.scratch = slot.get(staged);
  if (t.scratch.empty()) return make_error(errc::capacity_exhausted, "file tier: no I/O buffer");
  std::memcpy(t.scratch.data() + header_bytes, payload.data() + body, rest);
  std::fill(t.scratch.begin() + static_cast<ptrdiff_t>(header_bytes + rest), t.scratch.end(),
            '\0');
  block_file_id id = id_;
  id.key = key;
  encode_header(id, frame_checksum(payload), t.scratch.first(header_bytes));
  if (direct_from) {
    t.pieces[0] = {t.scratch.data(), header_bytes};
    t.count = 1;
    if (body > 0) t.pieces[t.count++] = {const_cast<char*>(payload.data()), body};
    if (staged > header_bytes) {
      t.pieces[t.count++] = {t.scratch.data() + header_bytes, staged - header_bytes};
    }
  } else {
    t.pieces[0] = {t.scratch.data(), staged};
    t.count = 1;
  }
  t.expected = block_file_bytes();
  t.stage = transfer_stage::move;
  t.fd = open_recycled(t);
  if (t.fd >= 0) return status::success();
  t.stage = transfer_stage::create;
  t.create_flags = open_flags(O_WRONLY | O_CREAT | O_EXCL);
  return defer_create ? status::success() : create(t);
}

status file_store::create(block_transfer& t) {
  for (;;) {
    const int fd = ::open(t.temp.c_str(), t.create_flags, 0600);
    bool again = false;
    status s = created(t, fd >= 0 ? fd : -errno, again);
    if (!again) return s;
  }
}

status file_store::created(block_transfer& t, int res, bool& again) {
  again = false;
  if (res >= 0) {
    t.fd = res;
    t.stage = transfer_stage::move;
    return status::success();
  }
  if (res == -ENOENT && !t.shard_made) {  // the first block of its shard directory
    if (auto s = make_private_dir(t.path.substr(0, t.path.rfind('/'))); !s) return s;
    t.shard_made = true;
    again = true;
    return status::success();
  }
  return io_failed("file tier: cannot create", t.temp, -res);
}

status file_store::open_for_read(const block_key& key, block_transfer& t) const {
  t.key = key;
  t.path = path_of(key);
  t.fd = ::open(t.path.c_str(), open_flags(O_RDONLY));
  if (t.fd < 0) {
    if (errno == ENOENT) return make_error(errc::not_found, "file tier: no file " + t.path);
    return io_failed("file tier: cannot open", t.path, errno);
  }
  struct stat st {};
  if (::fstat(t.fd, &st) != 0) {
    const int e = errno;
    ::close(t.fd);
    t.fd = -1;
    return io_failed("file tier: cannot stat", t.path, e);
  }
  t.file_size = static_cast<uint64_t>(st.st_size);
  if (t.file_size != block_file_bytes()) {
    ::close(t.fd);
    t.fd = -1;
    return refuse(t.path, make_error(errc::layout_mismatch,
                                     "block file refused: " + std::to_string(t.file_size) +
                                         " bytes, expected " +
                                         std::to_string(block_file_bytes())));
  }
  return status::success();
}

status file_store::refuse(const std::string& path, status why) const {
  ::unlink(path.c_str());
  return make_error(why.code(), why.message() + " (" + path + ", removed)");
}

status file_store::begin_read(const block_key& key, std::span<char> into, io_slot& slot,
                              block_transfer& t) {
  if (into.size() != id_.payload_bytes) {
    return wrong_size("a read into", into.size(), id_.payload_bytes);
  }
  t.op = transfer_op::read;
  t.into = into;
  // Into page-aligned memory the KV is read where it goes: the header and the last partial page
  // land in the slot. Other memory gets the whole file staged in the slot.
  t.direct_into = page_aligned(into.data());
  const size_t body = t.direct_into ? into.size() / page_bytes * page_bytes : 0;
  const size_t staged = block_file_bytes() - body;
  t.scratch = slot.get(staged);
  if (t.scratch.empty()) return make_error(errc::capacity_exhausted, "file tier: no I/O buffer");
  if (auto s = open_for_read(key, t); !s) return s;
  t.pieces[0] = {t.scratch.data(), t.direct_into ? header_bytes : staged};
  t.count = 1;
  if (t.direct_into) {
    if (body > 0) t.pieces[t.count++] = {into.data(), body};
    if (staged > header_bytes) {
      t.pieces[t.count++] = {t.scratch.data() + header_bytes, staged - header_bytes};
    }
  }
  t.expected = block_file_bytes();
  return status::success();
}

status file_store::begin_check(const block_key& key, io_slot& slot, block_transfer& t) {
  t.op = transfer_op::check;
  t.scratch = slot.get(header_bytes);
  if (t.scratch.empty()) return make_error(errc::capacity_exhausted, "file tier: no I/O buffer");
  if (auto s = open_for_read(key, t); !s) return s;
  t.pieces[0] = {t.scratch.data(), header_bytes};
  t.count = 1;
  t.expected = header_bytes;
  return status::success();
}

status file_store::finish(block_transfer& t) {
  if (t.fd >= 0 && ::close(t.fd) != 0 && t.outcome.ok() && t.op == transfer_op::write) {
    fail_transfer(t, errno);
  }
  t.fd = -1;
  switch (t.op) {
    case transfer_op::write:
      return finish_write(t);
    case transfer_op::read:
      return finish_read(t);
    case transfer_op::check:
      return finish_check(t);
  }
  return make_error(errc::invalid_argument, "file tier: unknown transfer");
}

status file_store::finish_write(block_transfer& t) {
  if (!t.outcome) {
    ::unlink(t.temp.c_str());
    return std::move(t.outcome);
  }
  for (;;) {
    const int res = ::rename(t.temp.c_str(), t.path.c_str()) == 0 ? 0 : -errno;
    bool again = false;
    status s = renamed(t, res, again);
    if (!again) return s;
  }
}

status file_store::close_for_rename(block_transfer& t) {
  if (t.fd >= 0 && ::close(t.fd) != 0 && t.outcome.ok()) fail_transfer(t, errno);
  t.fd = -1;
  if (!t.outcome) {
    ::unlink(t.temp.c_str());
    return std::move(t.outcome);
  }
  t.stage = transfer_stage::rename;
  return status::success();
}

status file_store::renamed(block_transfer& t, int res, bool& again) {
  again = false;
  if (res == 0) return status::success();
  status s;
  if (res == -ENOENT && !t.shard_made) {  // a recycled file, into a shard not made yet
    s = make_private_dir(t.path.substr(0, t.path.rfind('/')));
    t.shard_made = again = s.ok();
    if (again) return s;
  } else {
    s = io_failed("file tier: cannot rename into", t.path, -res);
  }
  ::unlink(t.temp.c_str());
  return s;
}

status file_store::finish_read(block_transfer& t) {
  if (!t.outcome) return std::move(t.outcome);
  if (t.done != block_file_bytes()) {
    return refuse(t.path, make_error(errc::layout_mismatch,
                                     "block file refused: " + std::to_string(t.done) +
                                         " bytes read, expected " +
                                         std::to_string(block_file_bytes())));
  }
  block_file_id id = id_;
  id.key = t.key;
  const auto crc = check_header(id, t.scratch.first(header_bytes));
  if (!crc) return refuse(t.path, crc.error());
  std::span<const char> kv;
  if (t.direct_into) {
    const size_t body = t.into.size() / page_bytes * page_bytes;
    std::memcpy(t.into.data() + body, t.scratch.data() + header_bytes, t.into.size() - body);
    kv = t.into;
  } else {
    kv = t.scratch.subspan(header_bytes, t.into.size());
  }
  if (frame_checksum(kv) != *crc) {
    return refuse(t.path, make_error(errc::layout_mismatch,
                                     "block file refused: the KV's checksum does not match"));
  }
  if (!t.direct_into) std::memcpy(t.into.data(), kv.data(), kv.size());
  return status::success();
}

status file_store::finish_check(block_transfer& t) {
  if (!t.outcome) return std::move(t.outcome);
  block_file_id id = id_;
  id.key = t.key;
  if (auto crc = check_header(id, t.scratch.first(t.done)); !crc) {
    return refuse(t.path, crc.error());
  }
  return status::success();
}

status file_store::remove(const block_key& key) {
  const std::string path = path_of(key);
  {
    std::lock_guard lock{recycled_mu_};
    if (recycled_.size() < max_recycled_) {
      std::string kept = temp_name(path);
      if (::rename(path.c_str(), kept.c_str()) == 0) {
        recycled_.push_back(std::move(kept));
        return status::success();
      }
      if (errno == ENOENT) return status::success();
    }
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_failed("file tier: cannot remove", path, errno);
  }
  return status::success();
}

}  // namespace kvc::disk
