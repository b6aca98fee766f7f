#pragma once
/// Scratch directories for the file tier's tests: a fresh directory under a base (/tmp: the
/// machine's disk; /dev/shm: tmpfs), removed with everything in it at the end, and a small tmpfs
/// mounted for ENOSPC, read-only and no-O_DIRECT cases (root only; the test skips when mount is
/// refused).
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

namespace kvc::disk::testing {

class scratch_dir {
 public:
  explicit scratch_dir(const std::string& base) {
    std::string pattern = base + "/kvc-disk-test-XXXXXX";
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~scratch_dir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// A file system of `type` ("tmpfs", "ramfs") mounted with `options` (e.g. "size=1m") on a fresh
/// directory; unmounted at the end. `why_not` says why there is none (not root, no permission).
class scratch_mount {
 public:
  scratch_mount(const std::string& type, const std::string& options) : dir_("/tmp") {
    if (dir_.path().empty()) {
      why_not_ = "no scratch directory";
      return;
    }
    if (::mount(type.c_str(), dir_.path().c_str(), type.c_str(), 0, options.c_str()) != 0) {
      why_not_ = "mount of a " + type + " refused: " + std::strerror(errno);
      return;
    }
    mounted_ = true;
  }
  ~scratch_mount() {
    if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
  }
  /// Makes the mount read-only; false (and why_not) when refused.
  bool make_read_only() {
    if (::mount(nullptr, dir_.path().c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
      why_not_ = std::string{"remount read-only refused: "} + std::strerror(errno);
      return false;
    }
    return true;
  }
  bool mounted() const noexcept { return mounted_; }
  const std::string& why_not() const noexcept { return why_not_; }
  const std::string& path() const noexcept { return dir_.path(); }

 private:
  scratch_dir dir_;
  bool mounted_ = false;
  std::string why_not_;
};

}  // namespace kvc::disk::testing
