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

/// A page-aligned buffer owned by the calling thread, grown as needed (O_DIRECT needs aligned
/// memory; one per thread keeps concurrent calls apart without allocating per call).
std::span<char> thread_buffer(size_t bytes) {
  struct freer {
    void operator()(char* p) const noexcept { std::free(p); }
  };
  thread_local std::unique_ptr<char, freer> buf;
  thread_local size_t size = 0;
  if (size < bytes) {
    buf.reset(static_cast<char*>(std::aligned_alloc(page_bytes, bytes)));
    size = buf ? bytes : 0;
  }
  return {buf.get(), buf ? bytes : 0};
}

/// Writes all of `bytes` at offset 0 (short writes continue; EINTR retries).
status write_all(int fd, std::span<const char> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_failed("cannot write", path, errno);
    if (n == 0) return io_failed("cannot write", path, EIO);
    done += static_cast<size_t>(n);
  }
  return status::success();
}

/// Reads up to `bytes.size()` bytes at offset 0; returns how many there were.
result<size_t> read_all(int fd, std::span<char> bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd, bytes.data() + done, bytes.size() - done,
                              static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_failed("cannot read", path, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
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
      want_direct_(options.direct_io) {}

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
  const auto page = thread_buffer(page_bytes);
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
  if (payload.size() != id_.payload_bytes) {
    return make_error(errc::invalid_argument, "file tier: a block of " +
                                                  std::to_string(payload.size()) +
                                                  " bytes, expected " +
                                                  std::to_string(id_.payload_bytes));
  }
  static std::atomic<uint64_t> temp_counter{0};
  const std::string path = path_of(key);
  const std::string temp = path + std::string{temp_marker} + std::to_string(::getpid()) + "." +
                           std::to_string(temp_counter.fetch_add(1));
  const auto buf = thread_buffer(block_file_bytes());
  if (buf.empty()) return make_error(errc::capacity_exhausted, "file tier: no I/O buffer");
  block_file_id id = id_;
  id.key = key;
  std::memcpy(buf.data() + header_bytes, payload.data(), payload.size());
  std::fill(buf.begin() + static_cast<ptrdiff_t>(header_bytes + payload.size()), buf.end(), '\0');
  encode_header(id, frame_checksum(payload), buf.first(header_bytes));

  const int flags = open_flags(O_WRONLY | O_CREAT | O_EXCL);
  int fd = ::open(temp.c_str(), flags, 0600);
  if (fd < 0 && errno == ENOENT) {  // the first block of its shard directory
    if (auto s = make_private_dir(path.substr(0, path.rfind('/'))); !s) return s;
    fd = ::open(temp.c_str(), flags, 0600);
  }
  if (fd < 0) return io_failed("file tier: cannot create", temp, errno);
  status s = write_all(fd, buf, temp);
  if (::close(fd) != 0 && s.ok()) s = io_failed("file tier: cannot write", temp, errno);
  if (s.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    s = io_failed("file tier: cannot rename into", path, errno);
  }
  if (!s.ok()) ::unlink(temp.c_str());
  return s;
}

result<int> file_store::open_for_read(const block_key& key, const std::string& path) const {
  const int fd = ::open(path.c_str(), open_flags(O_RDONLY));
  if (fd >= 0) return fd;
  if (errno == ENOENT) return make_error(errc::not_found, "file tier: no file " + path);
  return io_failed("file tier: cannot open", path, errno);
}

status file_store::refuse(const std::string& path, status why) const {
  ::unlink(path.c_str());
  return make_error(why.code(), why.message() + " (" + path + ", removed)");
}

status file_store::read(const block_key& key, std::span<char> into) {
  if (into.size() != id_.payload_bytes) {
    return make_error(errc::invalid_argument, "file tier: a read into " +
                                                  std::to_string(into.size()) +
                                                  " bytes, expected " +
                                                  std::to_string(id_.payload_bytes));
  }
  const std::string path = path_of(key);
  auto fd = open_for_read(key, path);
  if (!fd) return fd.error();
  // One page more than the file: a longer file shows up as a longer read.
  const auto buf = thread_buffer(block_file_bytes() + page_bytes);
  const auto got = read_all(*fd, buf, path);
  ::close(*fd);
  if (!got) return got.error();
  if (*got != block_file_bytes()) {
    return refuse(path, make_error(errc::layout_mismatch,
                                   "block file refused: " + std::to_string(*got) +
                                       " bytes, expected " + std::to_string(block_file_bytes())));
  }
  block_file_id id = id_;
  id.key = key;
  const auto crc = check_header(id, buf.first(header_bytes));
  if (!crc) return refuse(path, crc.error());
  const auto payload = buf.subspan(header_bytes, id_.payload_bytes);
  if (frame_checksum(payload) != *crc) {
    return refuse(path, make_error(errc::layout_mismatch,
                                   "block file refused: the KV's checksum does not match"));
  }
  std::memcpy(into.data(), payload.data(), payload.size());
  return status::success();
}

status file_store::check(const block_key& key) {
  const std::string path = path_of(key);
  auto fd = open_for_read(key, path);
  if (!fd) return fd.error();
  struct stat st {};
  if (::fstat(*fd, &st) != 0) {
    const int e = errno;
    ::close(*fd);
    return io_failed("file tier: cannot stat", path, e);
  }
  const auto buf = thread_buffer(block_file_bytes());
  const auto got = read_all(*fd, buf.first(header_bytes), path);
  ::close(*fd);
  if (!got) return got.error();
  if (static_cast<uint64_t>(st.st_size) != block_file_bytes()) {
    return refuse(path, make_error(errc::layout_mismatch,
                                   "block file refused: " + std::to_string(st.st_size) +
                                       " bytes, expected " + std::to_string(block_file_bytes())));
  }
  block_file_id id = id_;
  id.key = key;
  if (auto crc = check_header(id, buf.first(*got)); !crc) return refuse(path, crc.error());
  return status::success();
}

status file_store::remove(const block_key& key) {
  const std::string path = path_of(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return io_failed("file tier: cannot remove", path, errno);
  }
  return status::success();
}

}  // namespace kvc::disk
